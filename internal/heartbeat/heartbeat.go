// Package heartbeat is the watchdog's dead man's switch. While the daemon
// is healthy (it evaluated recently and, in HA mode, holds the leader
// Lease) it sends an HTTP request to a heartbeat URL every interval. The
// receiver — healthchecks.io, Dead Man's Snitch, Cronitor, Better Stack,
// an Opsgenie heartbeat or a PagerDuty heartbeat-style monitor — pages
// when the pings stop, which is the one failure the watchdog cannot
// report itself: its own death, a hang, or a lost network path.
//
// Only the HTTP ping is implemented. A PagerDuty Events API trigger that
// resolves itself is not a heartbeat (nothing fires when the sender
// dies); point the URL at a service whose whole purpose is to page on
// silence instead.
//
// The URL usually embeds a credential (a check UUID or an API key), so it
// is a notify.Secret: it is never logged, never part of an error message,
// and never exported in metrics.
package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/promreg"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/httpclient"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// Defaults.
const (
	DefaultInterval = time.Minute
	DefaultMethod   = http.MethodGet
	// DefaultTimeout bounds one ping; the effective default is the smaller
	// of this and half the interval.
	DefaultTimeout = 10 * time.Second
	// MinInterval keeps a misconfiguration from hammering the receiver.
	MinInterval = time.Second
)

// Config is the "heartbeat" section. Zero fields take the defaults (see
// WithDefaults), so a partial YAML section needs no custom unmarshaller.
type Config struct {
	// Enabled turns the pings on.
	Enabled bool `yaml:"enabled"`
	// Interval between pings while healthy. Configure the receiver's period
	// to the same value and its grace period to at least one more interval.
	Interval time.Duration `yaml:"interval"`
	// Timeout of one ping; 0 is min(10s, interval/2).
	Timeout time.Duration `yaml:"timeout"`
	// URL to ping. It is a credential: put it in a Secret and use URLFile.
	URL notify.Secret `yaml:"url"`
	// URLFile is a file holding the URL (a mounted Secret key); read once
	// by New. Set URL or URLFile, not both.
	URLFile string `yaml:"url_file"`
	// Method is GET (default) or POST (with an empty body).
	Method string `yaml:"method"`
}

// DefaultConfig is disabled, with a one-minute interval.
func DefaultConfig() Config {
	return Config{Interval: DefaultInterval, Method: DefaultMethod}
}

// WithDefaults fills the zero fields and normalises the method's case.
func (c Config) WithDefaults() Config {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Method == "" {
		c.Method = DefaultMethod
	}
	c.Method = strings.ToUpper(c.Method)
	if c.Timeout == 0 {
		c.Timeout = min(DefaultTimeout, c.Interval/2)
	}
	return c
}

// Validate reports every problem, each with its YAML path under prefix
// (the daemon's config calls it with "heartbeat"). A disabled heartbeat is
// not checked. Messages never contain the URL.
func (c Config) Validate(prefix string) error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	add := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", prefix, path, fmt.Sprintf(format, a...)))
	}
	if c.Interval < 0 || c.Timeout < 0 {
		if c.Interval < 0 {
			add("interval", "must not be negative, got %s", c.Interval)
		}
		if c.Timeout < 0 {
			add("timeout", "must not be negative, got %s", c.Timeout)
		}
		return errors.Join(errs...)
	}
	d := c.WithDefaults()
	if d.Interval < MinInterval {
		add("interval", "must be at least %s, got %s", MinInterval, d.Interval)
	}
	if d.Timeout >= d.Interval {
		add("timeout", "%s must be below interval %s", d.Timeout, d.Interval)
	}
	switch d.Method {
	case http.MethodGet, http.MethodPost:
	default:
		add("method", "%q is not GET or POST", c.Method)
	}
	switch {
	case c.URL.IsSet() && c.URLFile != "":
		add("url", "set url or url_file, not both")
	case !c.URL.IsSet() && c.URLFile == "":
		add("url", "required when the heartbeat is enabled (or url_file)")
	case c.URL.IsSet():
		if err := checkURL(string(c.URL)); err != nil {
			add("url", "%v", err)
		}
	}
	return errors.Join(errs...)
}

// checkURL says what is wrong with a ping URL without repeating it.
func checkURL(raw string) error {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return errors.New("not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("not an absolute http(s) URL")
	}
	return nil
}

// Failure reasons, the values of the "reason" label.
const (
	ReasonTimeout    = "timeout"     // no answer within the timeout
	ReasonHTTPStatus = "http_status" // answered, but not 2xx
	ReasonError      = "error"       // connection refused, DNS, TLS, ...
)

// Heartbeat pings a URL while the daemon is healthy. Build it with New.
type Heartbeat struct {
	cfg     Config
	url     string
	client  *http.Client
	healthy func() bool
	log     *zap.Logger
	now     func() time.Time

	// recheck is how often health is polled while unhealthy, so that the
	// first ping follows soon after the daemon becomes healthy.
	recheck time.Duration
	// retry is the delay after a failed ping, shorter than the interval so
	// a single lost ping does not open a gap of two intervals.
	retry time.Duration

	lastSuccess prometheus.Gauge
	failures    *prometheus.CounterVec
	interval    prometheus.Gauge
}

// New checks cfg, reads URLFile and registers the metrics on reg. It
// starts nothing. healthy says whether a ping is due at all: the daemon
// passes "evaluated recently and (in HA mode) is the leader"; nil is
// always healthy. A nil client gets a private transport. A disabled
// config gives a Heartbeat whose Run only waits, with the metrics
// registered (interval 0) so dashboards need no special case.
//
// New can be called again with the same registry (a configuration
// reload): the already registered metrics are reused.
func New(cfg Config, client *http.Client, healthy func() bool, reg prometheus.Registerer, logger *zap.Logger) (*Heartbeat, error) {
	if err := cfg.Validate("heartbeat"); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if client == nil {
		client = httpclient.New("heartbeat", 0)
	}
	if healthy == nil {
		healthy = func() bool { return true }
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	h := &Heartbeat{
		cfg:     cfg,
		client:  client,
		healthy: healthy,
		log:     logger,
		now:     time.Now,
		recheck: min(cfg.Interval, 5*time.Second),
		retry:   max(min(cfg.Interval/4, 15*time.Second), time.Second),
	}
	if cfg.Enabled {
		raw := string(cfg.URL)
		if cfg.URLFile != "" {
			b, err := os.ReadFile(cfg.URLFile)
			if err != nil {
				// The *PathError names the file, not its content.
				return nil, fmt.Errorf("heartbeat.url_file: %w", err)
			}
			raw = string(b)
			if err := checkURL(raw); err != nil {
				return nil, fmt.Errorf("heartbeat.url_file: %s: %w", cfg.URLFile, err)
			}
		}
		h.url = strings.TrimSpace(raw)
	}
	h.lastSuccess = promreg.Reuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "watchdog_heartbeat_last_success_timestamp_seconds",
		Help: "Unix time of the last heartbeat ping the receiver accepted; 0 before the first.",
	}))
	h.failures = promreg.Reuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "watchdog_heartbeat_failures_total",
		Help: "Heartbeat pings that failed, by reason (timeout, http_status, error).",
	}, []string{"reason"}))
	h.interval = promreg.Reuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "watchdog_heartbeat_interval_seconds",
		Help: "Configured interval between heartbeat pings; 0 when the heartbeat is disabled.",
	}))
	for _, r := range [...]string{ReasonTimeout, ReasonHTTPStatus, ReasonError} {
		h.failures.WithLabelValues(r)
	}
	if cfg.Enabled {
		h.interval.Set(cfg.Interval.Seconds())
	} else {
		h.interval.Set(0)
	}
	return h, nil
}

// Run pings until ctx is done and returns nil then. The first ping is sent
// as soon as the daemon is healthy; later ones every interval. While the
// daemon is unhealthy no ping is sent, so the receiver pages.
func (h *Heartbeat) Run(ctx context.Context) error {
	if !h.cfg.Enabled {
		<-ctx.Done()
		return nil
	}
	h.log.Info("heartbeat started", zap.Duration("interval", h.cfg.Interval), zap.String("method", h.cfg.Method))
	timer := time.NewTimer(0)
	defer timer.Stop()
	paused, failing := false, false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		if !h.healthy() {
			if !paused {
				h.log.Info("heartbeat paused: the daemon is not healthy or not the leader")
				paused = true
			}
			timer.Reset(h.recheck)
			continue
		}
		if paused {
			h.log.Info("heartbeat resumed")
			paused = false
		}
		reason, err := h.ping(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			h.failures.WithLabelValues(reason).Inc()
			h.log.Warn("heartbeat ping failed", zap.String("reason", reason), zap.Error(err),
				zap.Duration("retry_in", h.retry))
			failing = true
			timer.Reset(h.retry)
			continue
		}
		if failing {
			h.log.Info("heartbeat ping succeeded again")
			failing = false
		}
		h.lastSuccess.Set(float64(h.now().UnixNano()) / 1e9)
		timer.Reset(h.cfg.Interval)
	}
}

// ping sends one request. Errors never contain the URL.
func (h *Heartbeat) ping(ctx context.Context) (reason string, err error) {
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, h.cfg.Method, h.url, http.NoBody)
	if err != nil {
		return ReasonError, errors.New("cannot build the request") // the error would quote the URL
	}
	req.Header.Set("User-Agent", "sglang-watchdog-heartbeat")
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded || isTimeout(err) {
			return ReasonTimeout, fmt.Errorf("no answer within %s", h.cfg.Timeout)
		}
		return ReasonError, redact.Secrets{Values: []string{h.url}}.Error(err)
	}
	defer resp.Body.Close()
	// Drain a little so the connection can be reused; the body is not
	// logged (a receiver may echo the URL back).
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return ReasonHTTPStatus, fmt.Errorf("receiver answered %s", resp.Status)
	}
	return "", nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
