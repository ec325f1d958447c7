// Package webhook delivers watchdog incidents as signed JSON to any HTTP
// endpoint: a chat bot, a ticketing bridge, a team's own automation. The
// body is a versioned document (Payload, docs/webhook.md); every request
// carries an HMAC-SHA256 signature over a timestamp and the body, so the
// receiver can tell the watchdog's requests from forgeries and replays.
// One call is one attempt; failures are classified for the shared queue in
// pkg/notify.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/httpclient"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// Request headers.
const (
	// SignatureHeader is "sha256=" and the lower-case hex HMAC-SHA256,
	// keyed with the shared secret, of the timestamp header's value, a
	// ".", and the body: exactly the bytes
	// "<X-Watchdog-Timestamp>.<body>".
	SignatureHeader = "X-Watchdog-Signature"
	// TimestampHeader is when the request was signed, in Unix seconds.
	// A receiver rejects a request whose timestamp is far from its own
	// clock (five minutes, say): a captured request cannot be replayed
	// later, and the timestamp cannot be changed without the secret.
	TimestampHeader = "X-Watchdog-Timestamp"
	// DeliveryHeader names the event: "<fingerprint>-<seq>". A retried
	// attempt sends the same value, so a receiver can drop duplicates.
	DeliveryHeader = "X-Watchdog-Delivery"
)

const maxErrorBody = 1024

// Config configures one webhook receiver.
type Config struct {
	// URL is where events are POSTed. It is a secret: many endpoints
	// authenticate by a token in the URL.
	URL notify.Secret `yaml:"url"`
	// Secret keys the HMAC-SHA256 signature.
	Secret notify.Secret `yaml:"secret"`
}

// Validate reports every problem with YAML-relative paths; it never
// prints the URL or the secret.
func (c Config) Validate() error {
	var errs []error
	if !c.URL.IsSet() {
		errs = append(errs, errors.New("url: required (url or url_file)"))
	} else if u, err := url.Parse(string(c.URL)); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, errors.New("url: not an absolute http(s) URL"))
	}
	if !c.Secret.IsSet() {
		errs = append(errs, errors.New("secret: required (secret or secret_file): every request is signed with it"))
	}
	return errors.Join(errs...)
}

// Notifier POSTs events to one endpoint.
type Notifier struct {
	url     string
	secret  []byte
	client  *http.Client
	secrets redact.Secrets
	log     *zap.Logger
	now     func() time.Time
}

// New builds the notifier. httpClient nil gets a client with a 30 s
// timeout; the queue's attempt timeout bounds each call anyway.
func New(cfg Config, httpClient *http.Client, logger *zap.Logger) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if httpClient == nil {
		httpClient = httpclient.New("webhook", 30*time.Second)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	u := string(cfg.URL)
	// A server may quote the URL, or only its path and query, back in
	// an error: each is hidden wherever it appears.
	hidden := []string{u, string(cfg.Secret)}
	if parsed, err := url.Parse(u); err == nil {
		if parsed.Path != "" && parsed.Path != "/" {
			hidden = append(hidden, parsed.RequestURI(), parsed.Path)
		}
		if parsed.RawQuery != "" {
			hidden = append(hidden, parsed.RawQuery)
		}
	}
	return &Notifier{
		url: u, secret: []byte(cfg.Secret), client: httpClient, log: logger, now: time.Now,
		secrets: redact.Secrets{Values: hidden},
	}, nil
}

// Sign is the signature header's value for body signed at timestamp (the
// timestamp header's value).
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Notify implements notify.Notifier: one signed POST of ev's Payload.
func (n *Notifier) Notify(ctx context.Context, ev notify.Event) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "> 95%" stays readable; the body is not HTML
	err := enc.Encode(NewPayload(ev))
	body := bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
	if err != nil {
		return notify.Permanent(notify.WithReason(fmt.Errorf("webhook: encode: %w", err), notify.ReasonInvalidPayload))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url, bytes.NewReader(body))
	if err != nil {
		return notify.Permanent(fmt.Errorf("webhook: %s", n.secrets.String(err.Error())))
	}
	ts := strconv.FormatInt(n.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sglang-watchdog")
	req.Header.Set(TimestampHeader, ts)
	req.Header.Set(SignatureHeader, Sign(n.secret, ts, body))
	req.Header.Set(DeliveryHeader, ev.Fingerprint+"-"+strconv.FormatUint(ev.Seq, 10))
	resp, err := n.client.Do(req)
	if err != nil {
		// The URL is a secret: the error shows <secret> where it was.
		return fmt.Errorf("webhook: %w", n.secrets.Error(err))
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	text := strings.TrimSpace(n.secrets.String(string(msg)))
	return notify.ForStatus(fmt.Errorf("webhook: HTTP %d: %s", resp.StatusCode, text), resp.StatusCode, resp.Header)
}
