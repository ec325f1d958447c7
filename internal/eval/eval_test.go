package eval

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// fakeWindows serves replicas with no data; detectors here are fakes.
type fakeWindows struct{ replicas []detect.Replica }

func (f fakeWindows) Replicas() []detect.Replica { return f.replicas }
func (f fakeWindows) View(name string, fn func(detect.Window)) bool {
	fn(replicaOnly{name: name})
	return true
}

// replicaOnly is a window that only knows its replica and holds no data;
// the fake detectors need nothing else.
type replicaOnly struct{ name string }

func (r replicaOnly) Replica() detect.Replica                                      { return detect.Replica{Name: r.name, Model: "m"} }
func (replicaOnly) Scrape() detect.ScrapeState                                     { return detect.ScrapeState{} }
func (replicaOnly) Last(detect.Selector) (float64, bool)                           { return 0, false }
func (replicaOnly) Has(string) bool                                                { return false }
func (replicaOnly) Increase(detect.Selector, time.Time, time.Time) (float64, bool) { return 0, false }
func (replicaOnly) Rate(detect.Selector, time.Time, time.Time) (float64, bool)     { return 0, false }
func (replicaOnly) Avg(detect.Selector, time.Time, time.Time) (float64, bool)      { return 0, false }
func (replicaOnly) Max(detect.Selector, time.Time, time.Time) (float64, bool)      { return 0, false }
func (replicaOnly) Min(detect.Selector, time.Time, time.Time) (float64, bool)      { return 0, false }
func (replicaOnly) Quantile(float64, string, []detect.Match, time.Time, time.Time) (float64, bool) {
	return 0, false
}
func (replicaOnly) Observations(string, []detect.Match, time.Time, time.Time) (float64, bool) {
	return 0, false
}
func (replicaOnly) LabelValues(string, string) []string { return nil }
func (replicaOnly) Restarts(time.Time, time.Time) int   { return 0 }
func (replicaOnly) LastRestart() time.Time              { return time.Time{} }

// detectorFunc finds one class on the replicas listed in on.
type detectorFunc struct {
	class detect.Class
	on    map[string]bool
}

func (d *detectorFunc) Class() detect.Class { return d.class }
func (d *detectorFunc) Detect(w detect.Window, _ time.Time) []detect.Finding {
	if r := w.Replica().Name; d.on[r] {
		return []detect.Finding{{Class: d.class, Replica: r, Model: "m", Severity: detect.Critical, Summary: "s"}}
	}
	return nil
}

type recorder struct{ events []notify.Event }

func (r *recorder) Send(ev notify.Event) { r.events = append(r.events, ev) }

type savesTo struct {
	saved [][]alert.Incident
	err   error
}

func (s *savesTo) Save(_ string, v any) error {
	if s.err != nil {
		return s.err
	}
	s.saved = append(s.saved, v.([]alert.Incident))
	return nil
}

func newLoop(t *testing.T, ds []detect.Detector, reps []detect.Replica, p Persister) (*Loop, *recorder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec := &recorder{}
	cfg := alert.DefaultConfig()
	cfg.For = 0
	a := assess.New(ds, assess.Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()})
	l := New(Options{Interval: time.Second, Assessor: a,
		Tracker: alert.NewTracker(cfg), Windows: fakeWindows{reps}, Sender: rec, Persister: p, Logger: zap.NewNop()}, reg)
	return l, rec, reg
}

func TestEvaluateSendsPersistsAndPublishes(t *testing.T) {
	storm := &detectorFunc{class: detect.PreemptStorm, on: map[string]bool{"r1": true}}
	store := &savesTo{}
	reps := []detect.Replica{{Name: "r1", Model: "m"}, {Name: "r2", Model: "m"}, {Name: "r3", Model: "m"}, {Name: "r4", Model: "m"}}
	l, rec, reg := newLoop(t, []detect.Detector{storm}, reps, store)
	t0 := time.Unix(1000, 0)

	evs := l.Evaluate(t0)
	if len(evs) != 1 || len(rec.events) != 1 || rec.events[0].Kind != notify.KindTrigger {
		t.Fatalf("events %+v", rec.events)
	}
	if a := l.Alerts(); len(a) != 1 || a[0].State != alert.StateFiring || !l.LastEvaluation().Equal(t0) {
		t.Fatalf("published %+v", a)
	}
	if len(store.saved) != 1 || len(store.saved[0]) != 1 {
		t.Fatalf("firing alert not persisted: %+v", store.saved)
	}
	l.Evaluate(t0.Add(time.Second))
	if len(store.saved) != 1 {
		t.Errorf("unchanged state saved again (%d saves)", len(store.saved))
	}
	if got := testutil.ToFloat64(l.metrics.alerts.WithLabelValues("preempt_storm", "firing")); got != 1 {
		t.Errorf("watchdog_alerts firing = %v", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}

	// The replica is removed: its alert resolves as "target removed".
	delete(storm.on, "r1")
	l.Retire(func(r string) bool { return r == "r1" }, "target removed", t0.Add(2*time.Second))
	last := rec.events[len(rec.events)-1]
	if last.Kind != notify.KindResolve || last.Replica != "r1" {
		t.Fatalf("retire sent %+v", last)
	}
}

func TestFleetWideFindingsPageOnce(t *testing.T) {
	on := map[string]bool{}
	var reps []detect.Replica
	for _, r := range []string{"a", "b", "c", "d"} {
		on[r] = true
		reps = append(reps, detect.Replica{Name: r, Model: "m"})
	}
	l, rec, _ := newLoop(t, []detect.Detector{&detectorFunc{class: detect.CacheCollapse, on: on}}, reps, nil)
	l.Evaluate(time.Unix(1000, 0))
	if len(rec.events) != 1 || rec.events[0].Replica != correlate.FleetReplica("m") {
		t.Fatalf("want one fleet page, got %+v", rec.events)
	}
}

func TestSaveFailureIsCountedAndRetried(t *testing.T) {
	store := &savesTo{err: errors.New("disk full")}
	l, _, _ := newLoop(t, []detect.Detector{&detectorFunc{class: detect.ReplicaDown, on: map[string]bool{"r1": true}}}, []detect.Replica{{Name: "r1"}}, store)
	l.Evaluate(time.Unix(1000, 0))
	if got := testutil.ToFloat64(l.metrics.persistFail); got != 1 {
		t.Fatalf("failures counted %v", got)
	}
	store.err = nil
	l.Evaluate(time.Unix(1001, 0))
	if len(store.saved) != 1 {
		t.Fatal("save not retried after a failure")
	}
}
