// Package redact keeps credentials out of what the watchdog shows: logs,
// metric labels, pages and API responses. A credential rides in a URL
// (user:password@, ?token=) or is a value on its own: a bot token, a
// routing key, or a webhook or heartbeat URL whose path is the key.
package redact

import (
	"context"
	"errors"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Hidden stands where a secret was.
const Hidden = "<secret>"

// unparseable stands for a URL that does not parse, so none of it shows.
const unparseable = "<unparseable URL>"

// URL shows raw without what can authenticate: scheme, host and path,
// enough to tell addresses apart. Userinfo, query and fragment are
// dropped; a raw that does not parse shows as "<unparseable URL>".
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return unparseable
	}
	clean := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return clean.String()
}

// urlInText is a URL written out in text: a scheme, "://", and what
// follows up to a space, a quote or a bracket.
var urlInText = regexp.MustCompile("[a-zA-Z][a-zA-Z0-9+.-]*://[^\\s\"'`<>()\\[\\]]+")

// URLs returns text with every URL written in it shown as URL shows it:
// for text that may quote a URL nobody listed, such as a configuration
// error quoting the value it rejects. A credential that is a URL's path (a
// webhook) is not hidden; list those in Secrets.Values.
func URLs(text string) string {
	return urlInText.ReplaceAllStringFunc(text, URL)
}

// Secrets are the credentials one component holds.
type Secrets struct {
	// URLs authenticate by their userinfo or query (scrape targets).
	// Where one appears it shows as URL shows it; its password, userinfo
	// and query are hidden wherever they appear on their own.
	URLs []string
	// Values are credentials as a whole (tokens, routing keys, webhook and
	// heartbeat URLs): each shows as Hidden.
	Values []string
}

// String returns text with s hidden: for a server's answer, or any text
// built from something that may quote a credential.
func (s Secrets) String(text string) string {
	for _, v := range s.Values {
		if v != "" {
			text = strings.ReplaceAll(text, v, Hidden)
		}
	}
	for _, raw := range s.URLs {
		text = hideURL(text, raw)
	}
	return text
}

// hideURL replaces raw in text by what URL shows of it, then every part
// of raw that authenticates wherever it still appears (an inner error may
// quote a piece of it).
func hideURL(text, raw string) string {
	if raw == "" {
		return text
	}
	text = strings.ReplaceAll(text, raw, URL(raw))
	u, err := url.Parse(raw)
	if err != nil {
		return text
	}
	if u.User != nil {
		text = strings.ReplaceAll(text, u.User.String()+"@", "")
		if pw, ok := u.User.Password(); ok && pw != "" {
			text = strings.ReplaceAll(text, pw, Hidden)
		}
	}
	if u.RawQuery != "" {
		text = strings.ReplaceAll(text, u.RawQuery, Hidden)
	}
	return text
}

// Error returns err with s hidden from its message; an err with nothing
// to hide comes back as it is.
//
// A *url.Error in err's chain quotes the whole URL it requested, which
// may be one nobody listed (a redirect's target). That URL shows as URL
// shows it, or as Hidden when it holds one of s.Values, and its userinfo
// and query are hidden anywhere in the message. The result unwraps to a
// *url.Error so rebuilt and to the cause beneath it, so errors.Is and
// errors.As still classify it and a timeout stays a timeout; no error in
// its chain quotes a secret.
func (s Secrets) Error(err error) error {
	if err == nil {
		return nil
	}
	ue, ok := errors.AsType[*url.Error](err)
	if !ok {
		msg := s.String(err.Error())
		if msg == err.Error() {
			return err
		}
		return &redacted{msg: msg, timeout: isTimeout(err)}
	}
	shown := URL(ue.URL)
	for _, v := range s.Values {
		if v != "" && (strings.Contains(ue.URL, v) || URL(v) == shown) {
			shown = Hidden
		}
	}
	s.URLs = append(slices.Clip(s.URLs), ue.URL)
	clean := &url.Error{Op: ue.Op, URL: shown, Err: s.Error(ue.Err)}
	if err == error(ue) {
		return clean
	}
	msg := strings.ReplaceAll(err.Error(), ue.Error(), clean.Error())
	return &redacted{msg: s.String(msg), cause: clean, timeout: isTimeout(err)}
}

// redacted is an error whose message had secrets taken out. It unwraps
// only to an error as clean as itself.
type redacted struct {
	msg     string
	cause   error
	timeout bool
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.cause }

// Timeout answers as the error it replaces did; *url.Error asks its
// cause this way.
func (e *redacted) Timeout() bool { return e.timeout }

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	ne, ok := errors.AsType[net.Error](err)
	return ok && ne.Timeout()
}
