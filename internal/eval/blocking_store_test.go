package eval_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/persist"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

const replica = "llama-70b-0"

// stateOrder is the daemon's order of the state documents
// (cmd/watchdog): outboxes, then held pages, then alert state.
var stateOrder = []string{notify.StateDocumentPrefix + "*", eval.HeldDocument, eval.AlertsDocument}

// disk is the durable store shared by the incarnations of one daemon.
type disk struct{ *notifytest.MemStore }

// process is one incarnation's access to the disk: its writes can be made
// to wait (an API server that does not answer), and it can die, after
// which nothing it writes lands.
type process struct {
	disk   *notifytest.MemStore
	mu     sync.Mutex
	gate   chan struct{} // nil: writes go through
	dead   bool
	fail   map[string]error // per document
	landed []string         // documents written, in order
}

var errDead = errors.New("the process died before the write landed")

func (d disk) process() *process { return &process{disk: d.MemStore, fail: map[string]error{}} }

func (p *process) Load(name string, v any, now time.Time) error { return p.disk.Load(name, v, now) }

func (p *process) Save(name string, v any) error {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate != nil {
		<-gate
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dead {
		return errDead
	}
	if err := p.fail[name]; err != nil {
		return err
	}
	if err := p.disk.Save(name, v); err != nil {
		return err
	}
	p.landed = append(p.landed, name)
	return nil
}

// stall makes every write wait until resume or die.
func (p *process) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gate = make(chan struct{})
}

func (p *process) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// die: the writes under way and all later ones never land.
func (p *process) die() {
	p.mu.Lock()
	p.dead = true
	p.mu.Unlock()
	p.resume()
}

// failWrites makes the writes of document name fail with err (nil: succeed).
func (p *process) failWrites(name string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[name] = err
}

func (p *process) writes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.landed)
}

// scripted reports, for the replica, the findings the test sets.
type scripted struct {
	mu       sync.Mutex
	findings []detect.Finding
}

func (s *scripted) Class() detect.Class { return detect.PreemptStorm }

func (s *scripted) Detect(w detect.Window, _ time.Time) []detect.Finding {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.Replica().Name != replica {
		return nil
	}
	return slices.Clone(s.findings)
}

func (s *scripted) set(fs []detect.Finding) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.findings = fs
}

func storm(sev detect.Severity) []detect.Finding {
	return []detect.Finding{{
		Class: detect.PreemptStorm, Severity: sev, Replica: replica, Model: "meta-llama/Llama-3.1-70B-Instruct",
		Layer: "kv_memory", Summary: "Requests are being retracted with the KV cache full",
		Evidence: []detect.Evidence{{Name: "retractions", Value: 4.2, Baseline: 0.05, HasBaseline: true, Unit: "/s"}},
		Runbook:  detect.RunbookPath(detect.PreemptStorm),
	}}
}

// daemon is one incarnation wired as cmd/watchdog wires it: one writer
// over the state store for the dispatcher and the evaluation loop, and at
// start-up the saved alerts restored, then the incidents the notifiers
// hold open.
type daemon struct {
	writer  *persist.Writer
	d       *notify.Dispatcher
	tracker *alert.Tracker
	loop    *eval.Loop
	reg     *prometheus.Registry
	stop    []func()
}

func start(t *testing.T, store persist.Store, det *scripted, pd notify.Notifier, cfg alert.Config, interval time.Duration) *daemon {
	t.Helper()
	now := time.Now()
	reg := prometheus.NewRegistry()
	w := persist.New(store, persist.Options{Order: stateOrder, Metrics: persist.NewMetrics(reg)})
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{{Name: notify.IntegrationPagerDuty, Notifier: pd,
			Options: notify.QueueOptions{InitialBackoff: time.Second, MaxBackoff: time.Second, DrainTimeout: time.Second}}},
		Routes: notify.RouteConfig{Routes: []notify.Route{{Severities: []string{"critical"}, Integrations: []string{notify.IntegrationPagerDuty}}}},
		Store:  w, Registerer: reg,
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	tracker := alert.NewTracker(cfg)
	var saved []alert.Incident
	if err := w.Load(eval.AlertsDocument, &saved, now); err != nil {
		t.Fatal(err)
	}
	tracker.Restore(saved, now)
	tracker.RestoreIncidents(d.OpenIncidents(), now)
	windows, err := window.New(window.Options{Retention: 24 * time.Hour, ScrapeInterval: 5 * time.Second}, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.Append(series.Scrape{Target: replica, Kind: "engine", At: now}); err != nil {
		t.Fatal(err)
	}
	loop := eval.New(eval.Options{
		Interval: interval,
		Assessor: assess.New([]detect.Detector{det}, assess.Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()}),
		Tracker:  tracker, Windows: windows, Sender: d, Persister: w, Logger: zap.NewNop(),
		Links: alert.Links{ExternalURL: "https://watchdog.example"},
	}, reg)
	return &daemon{writer: w, d: d, tracker: tracker, loop: loop, reg: reg}
}

// run runs fn until the daemon stops.
func (dm *daemon) run(fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = fn(ctx); close(done) }()
	dm.stop = append(dm.stop, func() { cancel(); <-done })
}

// shutdown stops what run started, the last started first.
func (dm *daemon) shutdown() {
	for i := len(dm.stop) - 1; i >= 0; i-- {
		dm.stop[i]()
	}
}

// The evaluation loop keeps its interval while the state store does not
// answer: no save of the dispatcher's outbox nor of the alert state waits
// for it. The page is delivered from memory meanwhile, and once the store
// answers, the state of the last round lands.
func TestEvaluationKeepsItsCadenceWhileTheStoreBlocks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := disk{notifytest.NewMemStore()}.process()
		store.stall()
		det := &scripted{}
		pd := &notifytest.Recorder{}
		cfg := alert.DefaultConfig()
		cfg.For = 0
		const interval = 5 * time.Second
		dm := start(t, store, det, pd, cfg, interval)
		dm.run(dm.writer.Run)
		dm.run(dm.d.Run)
		dm.run(dm.loop.Run)
		begin := time.Now()
		for i := 1; i <= 12; i++ {
			// Every round changes the alert: an update, a new alert state.
			det.set(storm([]detect.Severity{detect.Critical, detect.Warning}[i%2]))
			time.Sleep(interval)
			synctest.Wait()
			if got, want := dm.loop.LastEvaluation(), begin.Add(time.Duration(i)*interval); !got.Equal(want) {
				t.Fatalf("round %d evaluated at %s, want %s: the loop waited for the store", i, got.Sub(begin), want.Sub(begin))
			}
		}
		if got := counter(t, dm.reg, "watchdog_evaluations_total"); got != 12 {
			t.Errorf("evaluations = %v, want 12", got)
		}
		if d := pd.Delivered(); len(d) == 0 || d[0].Kind != notify.KindTrigger {
			t.Errorf("pagerduty got %d events while the store blocked, want the trigger first", len(d))
		}
		if got := store.writes(); len(got) != 0 {
			t.Fatalf("writes landed while the store blocked: %v", got)
		}

		store.resume()
		synctest.Wait()
		var saved []alert.Incident
		if err := json.Unmarshal(store.disk.Raw(eval.AlertsDocument), &saved); err != nil {
			t.Fatal(err)
		}
		if len(saved) != 1 || saved[0].State != alert.StateFiring || saved[0].Seq != dm.tracker.Incidents()[0].Seq {
			t.Errorf("alert state written %+v, want the firing alert as of the last round", saved)
		}
		// The alert state of the last round lands after the outbox holding
		// that round's events: the last write of each is the newest state.
		// (An earlier round's alert state may be written before the outbox
		// of a later one.)
		written := store.writes()
		lastIndex := func(doc string) int {
			for i := len(written) - 1; i >= 0; i-- {
				if written[i] == doc {
					return i
				}
			}
			return -1
		}
		if i, j := slices.Index(written, "notify-pagerduty"), lastIndex(eval.AlertsDocument); i < 0 || j < lastIndex("notify-pagerduty") {
			t.Errorf("writes %v: the last alert state must be written after the outbox of its round", written)
		}
		dm.shutdown()
	})
}

// counter is the value of the unlabelled counter name in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not found", name)
	return 0
}
