package scrape

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"sync"
	"time"

	commoncfg "github.com/prometheus/common/config"
)

// HTTPClientConfig is Prometheus' HTTP client configuration, as a
// scrape_config takes it: tls_config (CA, client certificate and key,
// server_name, insecure_skip_verify), basic_auth (password or
// password_file), authorization, bearer_token(_file), oauth2, proxy_url,
// no_proxy, proxy_from_environment, follow_redirects, enable_http2,
// http_headers. Secrets marshal as <secret> and the value prints (%v, %s,
// %#v) as that YAML, so no rendering of it shows a password or a token.
type HTTPClientConfig struct {
	commoncfg.HTTPClientConfig `yaml:",inline"`
}

// DefaultHTTPClientConfig is the scrape client's configuration when none
// is given: Prometheus' defaults (redirects followed, HTTP/2) with the
// proxy taken from the environment (HTTPS_PROXY, NO_PROXY), as every
// client the watchdog does not configure takes it (pkg/httpclient).
func DefaultHTTPClientConfig() HTTPClientConfig {
	c := HTTPClientConfig{commoncfg.DefaultHTTPClientConfig}
	c.ProxyFromEnvironment = true
	return c
}

// UnmarshalYAML decodes over DefaultHTTPClientConfig, without the
// validation commoncfg.HTTPClientConfig runs while decoding, which would
// abort the whole file at the first problem and without its path: the
// configuration's Validate reports it with the others, under its path.
func (c *HTTPClientConfig) UnmarshalYAML(unmarshal func(any) error) error {
	type plain commoncfg.HTTPClientConfig
	p := plain(DefaultHTTPClientConfig().HTTPClientConfig)
	if err := unmarshal(&p); err != nil {
		return err
	}
	c.HTTPClientConfig = commoncfg.HTTPClientConfig(p)
	return nil
}

// GoString is the YAML String gives, so %#v hides the secrets too.
func (c HTTPClientConfig) GoString() string { return c.String() }

// resolved is c as the client is built from it: a proxy_url or no_proxy
// given takes the place of the environment's proxy, which is on by
// default (DefaultHTTPClientConfig) and which Prometheus' validation
// would otherwise find in conflict with them.
func (c HTTPClientConfig) resolved() commoncfg.HTTPClientConfig {
	out := c.HTTPClientConfig
	if (out.ProxyURL.URL != nil && out.ProxyURL.String() != "") || out.NoProxy != "" {
		out.ProxyFromEnvironment = false
	}
	return out
}

// Validate reports a contradiction in c (two credentials, a client
// certificate without its key, ...). It reads no file: the files are
// read when the client is built and, for credentials, on every request.
func (c HTTPClientConfig) Validate() error {
	r := c.resolved()
	if err := r.Validate(); err != nil {
		return err
	}
	return r.TLSConfig.Validate()
}

// Equal reports whether two target settings are the same, nil standing
// for the scrape-level ones.
func (c *HTTPClientConfig) Equal(o *HTTPClientConfig) bool {
	if c == nil || o == nil {
		return c == o
	}
	return reflect.DeepEqual(c.HTTPClientConfig, o.HTTPClientConfig)
}

// Dialer replaces the operating system's network (a test's in-memory one).
type Dialer = func(ctx context.Context, network, address string) (net.Conn, error)

// scrapeIdleConnTimeout closes a connection idle for several scrape
// intervals.
const scrapeIdleConnTimeout = 90 * time.Second

// NewClientFromConfig is a scrape client built from cfg as Prometheus
// builds its scrapers' (commoncfg.NewClientFromConfig): its own transport,
// keeping the connection of every target between scrapes (up to 1,000
// idle to one address, 20,000 in all), so a scrape does not pay a TCP and
// TLS handshake; a connection idle for 90 s is closed. With
// follow_redirects, redirects are followed only to the same scheme and
// host, at most 3 times. The CA, client certificate and key files are read
// now (an unreadable one is an error) and again when they change;
// password and token files are read on every request. dial, when not nil,
// replaces the operating system's network.
func NewClientFromConfig(cfg HTTPClientConfig, dial Dialer) (*http.Client, error) {
	r := cfg.resolved()
	c, err := commoncfg.NewClientFromConfig(r, "scrape", commoncfg.WithDialContextFunc(dial), commoncfg.WithIdleConnTimeout(scrapeIdleConnTimeout))
	if err != nil {
		return nil, err
	}
	if r.FollowRedirects {
		c.CheckRedirect = checkRedirect
	}
	return c, nil
}

// clientSet holds the clients of a Manager: the default one, for targets
// without settings of their own, and one per distinct setting of the
// others, shared by every target that has it (one parsed CA bundle and
// one transport, whatever the number of targets). Scrapes and health
// probes of a target use the same client.
type clientSet struct {
	dial Dialer

	mu         sync.Mutex
	deflt      *http.Client
	ownDefault bool // built here, so ours to close
	byConfig   map[*HTTPClientConfig]*http.Client
}

// newClientSet holds opts.Client as the default client, or builds it from
// opts.HTTPClient.
func newClientSet(opts Options) (*clientSet, error) {
	s := &clientSet{dial: opts.Dial, byConfig: map[*HTTPClientConfig]*http.Client{}}
	if opts.Client != nil {
		s.deflt = withRedirectPolicy(opts.Client)
		return s, nil
	}
	cfg := DefaultHTTPClientConfig()
	if opts.HTTPClient != nil {
		cfg = *opts.HTTPClient
	}
	c, err := NewClientFromConfig(cfg, opts.Dial)
	if err != nil {
		return nil, fmt.Errorf("http client: %w", err)
	}
	s.deflt, s.ownDefault = c, true
	return s, nil
}

// get returns t's client, building it at its first use. A setting whose
// client cannot be built (an unreadable CA file) is retried at the next
// use: the error is the scrape's.
func (s *clientSet) get(cfg *HTTPClientConfig) (*http.Client, error) {
	if cfg == nil {
		return s.deflt, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.byConfig[cfg]; ok {
		return c, nil
	}
	for other, c := range s.byConfig {
		if other.Equal(cfg) {
			s.byConfig[cfg] = c
			return c, nil
		}
	}
	c, err := NewClientFromConfig(*cfg, s.dial)
	if err != nil {
		return nil, fmt.Errorf("http client: %w", err)
	}
	s.byConfig[cfg] = c
	return c, nil
}

// check builds the clients of targets now, so a start with an unreadable
// CA file or client certificate fails at once.
func (s *clientSet) check(targets []Target) error {
	var errs []error
	for _, t := range targets {
		if _, err := s.get(t.HTTPClient); err != nil {
			errs = append(errs, fmt.Errorf("target %q: %w", t.Name, err))
		}
	}
	return errors.Join(errs...)
}

// keep forgets the clients no target in use has, closing their idle
// connections.
func (s *clientSet) keep(targets []Target) {
	used := make(map[*HTTPClientConfig]bool, len(targets))
	for _, t := range targets {
		if t.HTTPClient != nil {
			used[t.HTTPClient] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var drop []*http.Client
	for cfg, c := range s.byConfig {
		if !used[cfg] {
			delete(s.byConfig, cfg)
			drop = append(drop, c)
		}
	}
	for _, c := range drop {
		if !s.inUse(c) {
			c.CloseIdleConnections()
		}
	}
}

// inUse reports whether c is still some kept setting's client. s.mu must
// be held.
func (s *clientSet) inUse(c *http.Client) bool {
	for _, kept := range s.byConfig {
		if kept == c {
			return true
		}
	}
	return false
}

// close closes the idle connections of every client built here.
func (s *clientSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ownDefault {
		s.deflt.CloseIdleConnections()
	}
	for _, c := range s.byConfig {
		c.CloseIdleConnections()
	}
}
