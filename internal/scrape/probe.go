package scrape

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Synthetic series the active health probe adds to an engine target's
// scrape (Options.HealthProbeInterval > 0). They are not SGLang metrics:
// the "watchdog:" prefix says the watchdog measured them.
//
// A probe runs on its own schedule (every HealthProbeInterval), so its
// result is carried by ONE scrape — the next scrape of the target after
// the probe finished — and is absent from the scrapes in between. A
// successful scrape carries it as these samples; a failed one as
// series.Scrape.ProbeUp (a server that generates tokens while its /metrics
// does not answer is not down). Detectors must read them with range functions over at least two
// probe intervals (Min, Max, Avg, CountAbove), never with Last.
//
// Nothing is recorded when the endpoint does not exist there (HTTP 404,
// 405, 501: a proxy that only routes /metrics, a gateway): that says
// nothing about a hang, and a permanent 0 would page forever.
const (
	// HealthGenerateUp is 1 when GET /health_generate answered HTTP 200,
	// else 0 (503: the engine is Starting, shutting down, or produced no
	// output within SGLANG_HEALTH_CHECK_TIMEOUT, 20 s; timeout: no answer
	// within HealthProbeTimeout; connection refused/reset).
	HealthGenerateUp = "watchdog:health_generate_up"
	// HealthGenerateDuration is how long the probe took, in seconds (the
	// timeout when it got no answer). A healthy engine answers within one
	// decode step; seconds mean a stalled or starved scheduler.
	HealthGenerateDuration = "watchdog:health_generate_duration_seconds"
)

// Health probe defaults. The probe is off unless HealthProbeInterval is
// set; DefaultHealthProbeInterval is the suggested value.
const (
	DefaultHealthProbeInterval = 30 * time.Second
	// DefaultHealthProbeTimeout is longer than SGLang's own 20 s
	// (SGLANG_HEALTH_CHECK_TIMEOUT), so a stuck engine answers its 503
	// before we give up and the two cases stay distinguishable.
	DefaultHealthProbeTimeout = 25 * time.Second
	// DefaultHealthProbeConcurrency bounds the probes in flight: healthy
	// probes take one decode step, so it only matters when many engines
	// hang at once, and then it keeps the watchdog's sockets bounded.
	DefaultHealthProbeConcurrency = 32
)

// HealthProbe is the outcome of one GET <base>/health_generate, which
// makes the engine generate one token: the best single hang probe.
type HealthProbe struct {
	At       time.Time            // when the probe started
	Duration time.Duration        // until the answer, or the timeout
	Status   int                  // HTTP status; 0 when there was no response
	Up       bool                 // HTTP 200
	Reason   series.ScrapeFailure // "" when up; else timeout, refused, dns, http_status, redirect, error
	Error    string               // human text of the failure; never holds secrets
}

// Supported reports whether the target has the endpoint at all. An
// unsupported probe carries no information about the engine.
func (p HealthProbe) Supported() bool {
	switch p.Status {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return false
	}
	return true
}

// Samples renders the probe as the synthetic series HealthGenerateUp and
// HealthGenerateDuration; nil when the endpoint is not supported.
func (p HealthProbe) Samples() []series.Sample {
	if !p.Supported() {
		return nil
	}
	up := 0.0
	if p.Up {
		up = 1
	}
	return []series.Sample{
		{Name: HealthGenerateUp, Value: up},
		{Name: HealthGenerateDuration, Value: p.Duration.Seconds()},
	}
}

// HealthURL derives the /health_generate URL from a metrics URL: a path
// ending in /metrics has that suffix replaced (a replica behind a path
// prefix keeps it), any other path is replaced. Credentials and query are
// kept: they authenticate the same server.
func HealthURL(metricsURL string) (string, error) {
	u, err := url.Parse(metricsURL)
	if err != nil {
		return "", err
	}
	p := strings.TrimSuffix(u.Path, "/")
	if prefix, ok := strings.CutSuffix(p, "/metrics"); ok {
		p = prefix + "/health_generate"
	} else {
		p = "/health_generate"
	}
	u.Path, u.RawPath, u.Fragment = p, "", ""
	return u.String(), nil
}

// ProbeHealth probes t's /health_generate once within timeout (zero:
// DefaultHealthProbeTimeout), for a CLI or a smoke test. A nil client gets
// a dedicated one, built from t.HTTPClient when the target has settings of
// its own.
func ProbeHealth(ctx context.Context, client *http.Client, t Target, timeout time.Duration) HealthProbe {
	if timeout <= 0 {
		timeout = DefaultHealthProbeTimeout
	}
	switch {
	case client != nil:
	case t.HTTPClient != nil:
		c, err := NewClientFromConfig(*t.HTTPClient, nil)
		if err != nil {
			return HealthProbe{At: time.Now(), Reason: series.FailureError, Error: "http client: " + err.Error()}
		}
		client = c
		defer client.CloseIdleConnections()
	default:
		client = newDefaultClient(timeout)
		defer client.CloseIdleConnections()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return probeHealth(ctx, client, t, DefaultUserAgent)
}

// probeHealth runs one probe bounded by ctx's deadline.
func probeHealth(ctx context.Context, client *http.Client, t Target, userAgent string) HealthProbe {
	start := time.Now()
	p := HealthProbe{At: start}
	done := func() HealthProbe { p.Duration = time.Since(start); return p }
	target, err := HealthURL(t.URL)
	if err != nil {
		p.Reason, p.Error = series.FailureError, "bad target URL "+redact.URL(t.URL)
		return done()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		p.Reason, p.Error = series.FailureError, "bad target URL "+redact.URL(target)
		return done()
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := client.Do(req)
	if err != nil {
		fe := classify(ctx, err, target)
		p.Reason, p.Error = fe.reason, fe.msg
		return done()
	}
	// The body is a short status text; drain a little so the connection
	// can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	p.Status = resp.StatusCode
	if resp.StatusCode == http.StatusOK {
		p.Up = true
		return done()
	}
	p.Reason, p.Error = series.FailureHTTPStatus, "HTTP "+strings.TrimSpace(resp.Status)
	if resp.StatusCode == http.StatusNotFound {
		p.Error = "HTTP 404: no /health_generate at this target"
	}
	return done()
}

// AddHealthSamples appends the probe's synthetic samples to the scrape's
// own group (Worker ""), creating it when the scrape exposed nothing. A
// scrape that only carries workers (a gateway's /engine_metrics) gets
// nothing: the probe tested the target, not its workers. It reports
// whether samples were added.
func AddHealthSamples(sc *series.Scrape, p HealthProbe) bool {
	smp := p.Samples()
	if sc.Reason != "" || len(smp) == 0 {
		return false
	}
	for i := range sc.Groups {
		if g := &sc.Groups[i]; g.Worker == "" {
			// The normalizer hands out capacity-capped slices, so this
			// append never writes into another group's samples.
			g.Samples = append(g.Samples, smp...)
			return true
		}
	}
	if len(sc.Groups) == 0 {
		sc.Groups = []series.Group{{Samples: smp}}
		return true
	}
	return false
}

// probeOnce waits at most wait for a probe slot, then probes t within the
// probe timeout; ran is false when no slot freed up in time.
func (m *Manager) probeOnce(ctx context.Context, t Target, wait time.Duration) (p HealthProbe, ran bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case m.probeSlots <- struct{}{}:
	case <-timer.C:
		return HealthProbe{}, false
	case <-ctx.Done():
		return HealthProbe{}, false
	}
	defer func() { <-m.probeSlots }()
	pctx, cancel := context.WithTimeout(ctx, m.opts.HealthProbeTimeout)
	defer cancel()
	return m.probe(pctx, t), true
}

// probeFunc runs one probe of t bounded by ctx's deadline. It is a seam
// like fetchFunc: loops in synctest bubbles swap in a fake.
type probeFunc func(ctx context.Context, t Target) HealthProbe

// probeSlot holds the newest probe result not yet handed to a scrape.
type probeSlot struct {
	mu      sync.Mutex
	pending *HealthProbe
}

func (s *probeSlot) put(p HealthProbe) {
	s.mu.Lock()
	s.pending = &p
	s.mu.Unlock()
}

// take returns the pending result and clears the slot.
func (s *probeSlot) take() (HealthProbe, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return HealthProbe{}, false
	}
	p := *s.pending
	s.pending = nil
	return p, true
}

// startProbe launches t's probe loop when probing is on and t is an
// engine. The returned stop cancels it and waits for it to exit; slot is
// nil when no probe runs.
func (m *Manager) startProbe(ctx context.Context, t Target, log *zap.Logger) (slot *probeSlot, stop func()) {
	if m.probe == nil || t.Kind != KindEngine {
		return nil, func() {}
	}
	slot = &probeSlot{}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { m.runProbe(ctx, t, slot, log) })
	return slot, func() { cancel(); wg.Wait() }
}

// runProbe probes t every HealthProbeInterval, from its own start offset,
// until ctx is done. A slow probe delays only the next probe, never a
// scrape.
func (m *Manager) runProbe(ctx context.Context, t Target, slot *probeSlot, log *zap.Logger) {
	interval := m.opts.HealthProbeInterval
	first := time.NewTimer(startOffset(t.Name+"/health_generate", interval))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return
	case <-first.C:
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()

	last := "" // what was last logged: "", "up", "unsupported" or the failure
	for {
		p, ran := m.probeOnce(ctx, t, interval)
		if ctx.Err() != nil {
			return // stopping: a probe cut short by shutdown is not data
		}
		if !ran {
			// No slot within an interval: skipped, not failed.
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			continue
		}
		var state string
		switch {
		case !p.Supported():
			state = "unsupported"
			if state != last {
				log.Info("no /health_generate at this target; health probe results are not recorded", zap.String("error", p.Error))
			}
		case p.Up:
			state = "up"
			if last != "" && last != "up" {
				log.Info("health probe recovered")
			}
			slot.put(p)
		default:
			state = string(p.Reason) + ": " + p.Error
			if state != last {
				log.Warn("health probe failed", zap.String("reason", string(p.Reason)), zap.String("error", p.Error),
					zap.Duration("duration", p.Duration))
			}
			slot.put(p)
		}
		last = state
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
