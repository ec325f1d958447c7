package eval

import (
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/silence"
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// silencedLoop is the loop with a silence store, both on the state store
// dir (nil: in memory), as the daemon wires them.
type silencedLoop struct {
	*Loop
	rec      *recorder
	silences *silence.Store
	storm    *detectorFunc
}

// docStore is a state store: *state.Dir, or followerStore over one.
type docStore interface {
	Load(name string, v any, now time.Time) error
	Save(name string, v any) error
}

// followerStore reads the shared documents and writes nothing, as the
// kubestore of an HA follower.
type followerStore struct{ *state.Dir }

func (followerStore) Save(string, any) error { return nil }

func newSilencedLoop(t *testing.T, dir docStore, now time.Time) silencedLoop {
	t.Helper()
	reg := prometheus.NewRegistry()
	var p silence.Persister
	if dir != nil {
		p = dir
	}
	opts := silence.DefaultOptions()
	opts.Persister = p
	sil := silence.New(opts, reg)
	if err := sil.Load(now); err != nil {
		t.Fatal(err)
	}
	cfg := alert.DefaultConfig()
	cfg.For = 0
	tracker := alert.NewTracker(cfg)
	var persister Persister
	if dir != nil {
		persister = dir
		var saved []alert.Incident
		if err := dir.Load(AlertsDocument, &saved, now); err != nil {
			t.Fatal(err)
		}
		tracker.Restore(saved, now)
	}
	storm := &detectorFunc{class: detect.PreemptStorm, on: map[string]bool{"r1": true}}
	a := assess.New([]detect.Detector{storm}, assess.Config{Triage: detect.DefaultConfig().Triage, Correlation: correlate.DefaultConfig()})
	rec := &recorder{}
	l := New(Options{Interval: time.Second, Assessor: a, Tracker: tracker, Windows: fakeWindows{[]detect.Replica{{Name: "r1", Model: "m"}, {Name: "r2", Model: "m"}}},
		Sender: rec, Persister: persister, Silences: sil, Logger: zap.NewNop()}, reg)
	return silencedLoop{Loop: l, rec: rec, silences: sil, storm: storm}
}

func (s silencedLoop) silence(t *testing.T, matcher string, from, until, now time.Time) string {
	t.Helper()
	st, err := s.silences.Add(silence.Silence{Matchers: []string{matcher}, StartsAt: from, EndsAt: until, CreatedBy: "ana"}, now)
	if err != nil {
		t.Fatal(err)
	}
	return st.ID
}

func kinds(evs []notify.Event) []notify.Kind {
	var out []notify.Kind
	for _, ev := range evs {
		out = append(out, ev.Kind)
	}
	return out
}

var m0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestSilencedAlertIsTrackedAndPagesWhenTheSilenceEnds(t *testing.T) {
	l := newSilencedLoop(t, nil, m0)
	id := l.silence(t, `replica="r1"`, m0, m0.Add(10*time.Minute), m0)

	if evs := l.Evaluate(m0); len(evs) != 0 {
		t.Fatalf("silenced alert sent %v", kinds(evs))
	}
	alerts := l.Alerts()
	if len(alerts) != 1 || alerts[0].State != alert.StateFiring || !slices.Equal(alerts[0].SilencedBy, []string{id}) {
		t.Fatalf("alerts = %+v, want one firing, silenced by %s", alerts, id)
	}
	if evs := l.Evaluate(m0.Add(5 * time.Minute)); len(evs) != 0 {
		t.Fatalf("still silenced, sent %v", kinds(evs))
	}
	// The silence ends while the alert fires: the page goes out then, with
	// the incident's start and this round's content.
	evs := l.Evaluate(m0.Add(10 * time.Minute))
	if len(evs) != 1 || evs[0].Kind != notify.KindTrigger || !evs[0].At.Equal(m0.Add(10*time.Minute)) || !evs[0].StartsAt.Equal(m0) {
		t.Fatalf("at the silence's end sent %+v, want one trigger at +10m starting at +0", evs)
	}
	if len(l.Alerts()[0].SilencedBy) != 0 {
		t.Errorf("alert still shown silenced: %v", l.Alerts()[0].SilencedBy)
	}
	if evs := l.Evaluate(m0.Add(11 * time.Minute)); len(evs) != 0 {
		t.Errorf("page sent twice: %v", kinds(evs))
	}
	if got := testutil.ToFloat64(l.mute.silenced.WithLabelValues("trigger")); got != 1 {
		t.Errorf("watchdog_notifications_silenced_total{kind=trigger} = %v, want 1", got)
	}
}

// A silence of one incident (its ID, as the incident page's link creates)
// mutes that incident to its end and not the next one of the same replica
// and class.
func TestSilenceOfAnIncidentMutesItAndNotTheNext(t *testing.T) {
	l := newSilencedLoop(t, nil, m0)
	if evs := l.Evaluate(m0); len(evs) != 1 || evs[0].Kind != notify.KindTrigger {
		t.Fatalf("first round sent %v, want the trigger", kinds(evs))
	}
	first := l.Alerts()[0].ID
	id := l.silence(t, `incident="`+first+`"`, m0, m0.Add(2*time.Hour), m0)
	if evs := l.Evaluate(m0.Add(time.Minute)); len(evs) != 0 || !slices.Equal(l.Alerts()[0].SilencedBy, []string{id}) {
		t.Fatalf("silenced incident: sent %v, silenced by %v", kinds(evs), l.Alerts()[0].SilencedBy)
	}
	l.storm.on["r1"] = false
	l.Evaluate(m0.Add(2 * time.Minute))
	if evs := l.Evaluate(m0.Add(8 * time.Minute)); len(evs) != 1 || evs[0].Kind != notify.KindResolve {
		t.Fatalf("the paged incident ended under its silence: sent %v, want its resolve", kinds(evs))
	}
	l.storm.on["r1"] = true
	evs := l.Evaluate(m0.Add(10 * time.Minute))
	var next alert.Incident
	for _, a := range l.Alerts() {
		if a.State == alert.StateFiring {
			next = a
		}
	}
	if next.ID == "" || next.ID == first {
		t.Fatalf("no new incident after the first resolved: %+v", l.Alerts())
	}
	if len(evs) != 1 || evs[0].Kind != notify.KindTrigger || len(next.SilencedBy) != 0 {
		t.Fatalf("the next incident on r1 sent %v, silenced by %v; want its trigger, not silenced", kinds(evs), next.SilencedBy)
	}
}

func TestOverlappingSilencesMuteUntilTheLastEnds(t *testing.T) {
	l := newSilencedLoop(t, nil, m0)
	first := l.silence(t, `replica="r1"`, m0, m0.Add(time.Hour), m0)
	l.silence(t, `class=~"preempt.*"`, m0, m0.Add(20*time.Minute), m0)
	l.Evaluate(m0)
	if got := l.Alerts()[0].SilencedBy; len(got) != 2 {
		t.Fatalf("silenced by %v, want both", got)
	}
	if _, err := l.silences.Expire(first, m0.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if evs := l.Evaluate(m0.Add(6 * time.Minute)); len(evs) != 0 {
		t.Fatalf("one of two silences expired, sent %v", kinds(evs))
	}
	if evs := l.Evaluate(m0.Add(20 * time.Minute)); len(evs) != 1 || evs[0].Kind != notify.KindTrigger {
		t.Fatalf("both ended: sent %v, want a trigger", kinds(evs))
	}
}

func TestResolveOfAnIncidentNeverPagedIsNotSent(t *testing.T) {
	l := newSilencedLoop(t, nil, m0)
	l.silence(t, `replica="r1"`, m0, m0.Add(time.Hour), m0)
	l.Evaluate(m0)
	delete(l.storm.on, "r1")
	l.Evaluate(m0.Add(time.Minute))
	l.Evaluate(m0.Add(10 * time.Minute)) // past keep_firing_for: resolved
	if a := l.Alerts(); len(a) != 1 || a[0].State != alert.StateResolved {
		t.Fatalf("alerts = %+v, want it resolved", a)
	}
	l.Evaluate(m0.Add(2 * time.Hour)) // the silence has ended
	if len(l.rec.events) != 0 {
		t.Fatalf("an incident nobody was paged for sent %v", kinds(l.rec.events))
	}
	if got := testutil.ToFloat64(l.mute.silenced.WithLabelValues("resolve")); got != 1 {
		t.Errorf("silenced resolves = %v, want 1", got)
	}
}

func TestIncidentPagedBeforeTheSilenceSendsItsResolveButNoUpdates(t *testing.T) {
	l := newSilencedLoop(t, nil, m0)
	if evs := l.Evaluate(m0); len(evs) != 1 || evs[0].Kind != notify.KindTrigger {
		t.Fatalf("before the silence: %v", kinds(evs))
	}
	l.silence(t, `replica="r1"`, m0.Add(time.Minute), m0.Add(8*time.Hour), m0.Add(time.Minute))
	// repeat_interval (4h) elapses: the repeat is muted.
	if evs := l.Evaluate(m0.Add(4*time.Hour + time.Minute)); len(evs) != 0 {
		t.Fatalf("silenced repeat sent: %v", kinds(evs))
	}
	delete(l.storm.on, "r1")
	l.Evaluate(m0.Add(4*time.Hour + 2*time.Minute))
	evs := l.Evaluate(m0.Add(4*time.Hour + 10*time.Minute))
	if len(evs) != 1 || evs[0].Kind != notify.KindResolve {
		t.Fatalf("resolve of a paged incident: sent %v, want the resolve", kinds(evs))
	}
	if got := testutil.ToFloat64(l.mute.silenced.WithLabelValues("repeat")); got != 1 {
		t.Errorf("silenced repeats = %v, want 1", got)
	}
}

func TestMutedUpdatesAreSummedUpWhenTheSilenceEnds(t *testing.T) {
	l := newSilencedLoop(t, nil, m0)
	l.Evaluate(m0)
	id := l.silence(t, `replica="r1"`, m0, m0.Add(8*time.Hour), m0)
	l.Evaluate(m0.Add(4*time.Hour + time.Minute)) // a repeat, muted
	if _, err := l.silences.Expire(id, m0.Add(5*time.Hour)); err != nil {
		t.Fatal(err)
	}
	evs := l.Evaluate(m0.Add(5*time.Hour + time.Second))
	if len(evs) != 1 || evs[0].Kind != notify.KindUpdate {
		t.Fatalf("after the silence: sent %v, want one update with the current state", kinds(evs))
	}
}

func TestHeldPageSurvivesARestart(t *testing.T) {
	dir, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	before := newSilencedLoop(t, dir, m0)
	before.silence(t, `replica="r1"`, m0, m0.Add(30*time.Minute), m0)
	before.Evaluate(m0)

	after := newSilencedLoop(t, dir, m0.Add(10*time.Minute))
	if evs := after.Evaluate(m0.Add(10 * time.Minute)); len(evs) != 0 {
		t.Fatalf("after a restart, still silenced: sent %v", kinds(evs))
	}
	if got := after.Alerts(); len(got) != 1 || len(got[0].SilencedBy) != 1 {
		t.Fatalf("after a restart the alert is not shown silenced: %+v", got)
	}
	if evs := after.Evaluate(m0.Add(30 * time.Minute)); len(evs) != 1 || evs[0].Kind != notify.KindTrigger {
		t.Fatalf("silence ended after a restart: sent %v, want the held trigger", kinds(evs))
	}
}

func TestTakeoverReadsTheLeadersSilencesAndHeldPages(t *testing.T) {
	dir, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	follower := newSilencedLoop(t, followerStore{dir}, m0) // started before the silence existed
	leader := newSilencedLoop(t, dir, m0)
	leader.silence(t, `replica="r1"`, m0, m0.Add(30*time.Minute), m0)
	leader.Evaluate(m0)
	if len(leader.rec.events) != 0 {
		t.Fatalf("leader sent %v", kinds(leader.rec.events))
	}
	// The follower evaluates too; its events go to a standby dispatcher.
	follower.Evaluate(m0)

	follower.Takeover(nil, m0.Add(time.Minute))
	if got := follower.Alerts(); len(got) != 1 || len(got[0].SilencedBy) != 1 {
		t.Fatalf("after takeover the alert is not shown silenced: %+v", got)
	}
	if evs := follower.Evaluate(m0.Add(2 * time.Minute)); len(evs) != 0 {
		t.Fatalf("new leader ignored the silence: sent %v", kinds(evs))
	}
	if evs := follower.Evaluate(m0.Add(30 * time.Minute)); len(evs) != 1 || evs[0].Kind != notify.KindTrigger {
		t.Fatalf("silence ended on the new leader: sent %v, want a trigger", kinds(evs))
	}
}
