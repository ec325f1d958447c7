package scrape

import (
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Manager runs one scrape loop per target. Loops are independent: a slow or
// dead target only ever delays itself.
type Manager struct {
	opts    Options
	app     Appender
	logger  *zap.Logger
	metrics *metrics
	fetch   fetchFunc
	// clients are the targets' clients, shared by scrapes and probes.
	clients *clientSet
	// probe is nil unless Options.HealthProbeInterval is set.
	probe probeFunc
	// probeSlots bounds the probes in flight across all targets.
	probeSlots chan struct{}
	// scrapers holds parse/normalize buffers. Pooled rather than one per
	// loop: a scrape takes milliseconds every few seconds, so a thousand
	// loops share a handful of warm scrapers instead of each pinning
	// hundreds of KiB.
	scrapers sync.Pool
	// engines maps the readable address of every engine target to its
	// name (engineWorkers), so a gateway's copy of a scraped engine is
	// dropped. Atomic: loops read it while SetTargets holds mu.
	engines atomic.Pointer[map[string]string]

	mu      sync.Mutex
	targets []Target         // desired set, in the order given
	loops   map[string]*loop // running loops by target name
	runCtx  context.Context  // non-nil once Run started
	stopped bool             // Run has returned or is returning
	wg      sync.WaitGroup
}

type loop struct {
	target Target
	// pod is the newest pod status of the target, swapped by SetTargets
	// without restarting the loop.
	pod    atomic.Pointer[series.Pod]
	cancel context.CancelFunc
	done   chan struct{}
}

// New validates the options and targets and registers the scraper's metrics
// on reg. It starts nothing; Run does.
func New(targets []Target, opts Options, app Appender, reg prometheus.Registerer, logger *zap.Logger) (*Manager, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := validateTargets(targets); err != nil {
		return nil, err
	}
	if app == nil {
		return nil, errors.New("scrape: nil Appender")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	m := &Manager{
		opts:    opts,
		app:     app,
		logger:  logger,
		metrics: newMetrics(reg),
		targets: slices.Clone(targets),
		loops:   make(map[string]*loop, len(targets)),
	}
	m.setEngines(targets)
	if m.clients, err = newClientSet(opts); err != nil {
		return nil, err
	}
	if err := m.clients.check(targets); err != nil {
		m.clients.close()
		return nil, err
	}
	m.fetch = httpFetcher(m.clients.get, opts)
	if opts.HealthProbeInterval > 0 {
		m.probe = func(ctx context.Context, t Target) HealthProbe {
			client, err := m.clients.get(t.HTTPClient)
			if err != nil {
				return HealthProbe{At: time.Now(), Reason: series.FailureError, Error: err.Error()}
			}
			return probeHealth(ctx, client, t, opts.UserAgent)
		}
		m.probeSlots = make(chan struct{}, opts.HealthProbeConcurrency)
	}
	m.scrapers.New = func() any { return newScraper(m.fetch, m.opts) }
	return m, nil
}

// Run scrapes every target until ctx is done, then waits for all loops to
// exit. It may be called once.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.runCtx != nil || m.stopped {
		m.mu.Unlock()
		return errors.New("scrape: Run called twice")
	}
	m.runCtx = ctx
	for _, t := range m.targets {
		m.start(t)
	}
	m.mu.Unlock()

	<-ctx.Done()

	m.mu.Lock()
	m.stopped = true // no SetTargets may start a loop from here on
	m.mu.Unlock()
	m.wg.Wait()
	m.clients.close()
	return nil
}

// SetTargets replaces the target set: loops of new targets start, loops of
// removed targets stop, and loops of unchanged targets keep running
// untouched (same phase, same buffers). A target whose URL or kind changed
// is restarted. Removed targets have their metrics deleted and, if the
// Appender implements Remove(target string), are removed from it once
// their loop has exited, so no late Append can resurrect them. An invalid
// set is rejected whole.
func (m *Manager) SetTargets(targets []Target) error {
	if err := validateTargets(targets); err != nil {
		return err
	}
	want := make(map[string]Target, len(targets))
	for _, t := range targets {
		want[t.Name] = t
	}

	m.setEngines(targets)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.targets = slices.Clone(targets)
	if m.runCtx == nil || m.stopped {
		return nil // Run starts (or started and ended) with m.targets
	}

	var stopping []*loop
	for name, l := range m.loops {
		t, ok := want[name]
		if !ok || !t.Equal(l.target) {
			l.cancel()
			stopping = append(stopping, l)
			delete(m.loops, name)
			continue
		}
		l.pod.Store(t.Pod) // a status change keeps the loop's phase
	}
	// Loops exit promptly: their fetch is bound to the cancelled context.
	for _, l := range stopping {
		<-l.done
		if _, kept := want[l.target.Name]; kept {
			continue // restarted below with its new URL/kind
		}
		m.metrics.removeTarget(l.target.Name)
		if r, ok := m.app.(targetRemover); ok {
			r.Remove(l.target.Name)
		}
		m.logger.Info("target removed", zap.String("target", l.target.Name))
	}
	m.clients.keep(targets)
	for _, t := range targets {
		if _, running := m.loops[t.Name]; !running {
			m.start(t)
		}
	}
	return nil
}

// familyFilter is the filtering state of t's loop, or nil when t is
// scraped in full: filtering is off, every family is kept, or t is not an
// engine (gateways and dcgm-exporter do not serve their metrics through
// prometheus_client and know no name[] parameter).
func (m *Manager) familyFilter(t Target) *familyFilter {
	if !m.opts.FilterFamilies || m.opts.KeepFamilies == nil || t.Kind != KindEngine {
		return nil
	}
	return newFamilyFilter(newKeepSet(m.opts.KeepFamilies), m.opts.FilterRecheck)
}

func (m *Manager) setEngines(targets []Target) {
	engines := engineWorkers(targets)
	m.engines.Store(&engines)
}

// start launches the loop of t. m.mu must be held.
func (m *Manager) start(t Target) {
	m.metrics.addTarget(t.Name)
	ctx, cancel := context.WithCancel(m.runCtx)
	l := &loop{target: t, cancel: cancel, done: make(chan struct{})}
	l.pod.Store(t.Pod)
	m.loops[t.Name] = l
	m.wg.Go(func() {
		defer close(l.done)
		defer cancel()
		m.runLoop(ctx, l)
	})
}

// runLoop waits for the target's start offset, then scrapes every interval.
func (m *Manager) runLoop(ctx context.Context, l *loop) {
	t := l.target
	log := m.logger.With(zap.String("target", t.Name))
	probe, stopProbe := m.startProbe(ctx, t, log)
	defer stopProbe()

	first := time.NewTimer(startOffset(t.Name, m.opts.Interval))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return
	case <-first.C:
	}
	tick := time.NewTicker(m.opts.Interval)
	defer tick.Stop()

	var st loopState
	filter := m.familyFilter(t)
	for {
		t.Pod = l.pod.Load()
		s := m.scrapers.Get().(*scraper)
		sc := s.scrape(ctx, t, filter)
		if t.Kind == KindGateway {
			sc.Groups = withoutScrapedEngines(sc.Groups, *m.engines.Load())
		}
		if ctx.Err() != nil {
			m.scrapers.Put(s)
			return // stopping: a scrape cut short by shutdown is not data
		}
		if probe != nil {
			if p, ok := probe.take(); ok {
				if sc.Reason == "" {
					AddHealthSamples(&sc, p)
				} else if p.Supported() {
					// Whether the server still answers while /metrics does not.
					sc.ProbeUp = &p.Up
				}
			}
		}
		m.report(log, &st, sc)
		if filter != nil && sc.Reason == "" {
			m.metrics.familyFilter.WithLabelValues(filter.outcome).Inc()
		}
		// sc's groups are the scraper's buffers: another loop may take
		// them only once the Appender is done with them.
		m.scrapers.Put(s)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// loopState remembers what was last logged, so a target that stays down
// logs once, not every interval.
type loopState struct {
	lastErr       string // last failure message logged; "" while up
	lastAppendErr string
}

func (m *Manager) report(log *zap.Logger, st *loopState, sc series.Scrape) {
	result := resultOK
	if sc.Reason != "" {
		result = string(sc.Reason)
	}
	m.metrics.scrapes.WithLabelValues(sc.Target, result).Inc()
	m.metrics.duration.WithLabelValues(sc.Kind).Observe(sc.Duration.Seconds())
	if sc.Reason == "" {
		m.metrics.up.WithLabelValues(sc.Target).Set(1)
		n := 0
		for _, g := range sc.Groups {
			n += len(g.Samples)
		}
		m.metrics.samples.WithLabelValues(sc.Target).Set(float64(n))
		if st.lastErr != "" {
			log.Info("scrape recovered")
			st.lastErr = ""
		}
	} else {
		m.metrics.up.WithLabelValues(sc.Target).Set(0)
		if msg := string(sc.Reason) + ": " + sc.Error; msg != st.lastErr {
			log.Warn("scrape failed", zap.String("reason", string(sc.Reason)), zap.Int("status", sc.Status), zap.String("error", sc.Error))
			st.lastErr = msg
		}
	}

	if err := m.app.Append(sc); err != nil {
		m.metrics.appendErrors.Inc()
		if msg := err.Error(); msg != st.lastAppendErr {
			log.Warn("window refused scrape", zap.Error(err))
			st.lastAppendErr = msg
		}
	} else {
		st.lastAppendErr = ""
	}
}

// startOffset spreads first scrapes over the interval deterministically by
// target name (as Prometheus' scrape/target.go offset does), so a thousand
// targets do not fire in the same millisecond and a restart keeps each
// target's phase relative to start-up.
func startOffset(name string, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return time.Duration(h.Sum64() % uint64(interval))
}
