package incident

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// harness feeds a journal the way the evaluation loop does: a real
// tracker's alerts and events after each round of findings.
type harness struct {
	tr    *alert.Tracker
	links alert.Links
	j     *Journal
	// silence, when set, mutes alerts as the silences do: it sets
	// SilencedBy on the alerts the journal is given.
	silence func(a *alert.Incident)
}

func newHarness(t *testing.T, opts Options) *harness {
	t.Helper()
	cfg := alert.Config{Timing: alert.Timing{For: 30 * time.Second, KeepFiringFor: time.Minute}, ResolvedRetention: 10 * time.Minute}
	return &harness{tr: alert.NewTracker(cfg), j: New(opts, prometheus.NewRegistry(), t0)}
}

func (h *harness) round(now time.Time, findings ...detect.Finding) []notify.Event {
	var reps []detect.Replica
	for _, f := range findings {
		reps = append(reps, detect.Replica{Name: f.Replica, Model: f.Model})
	}
	round := assess.Round{At: now, Groups: correlate.Correlate(correlate.DefaultConfig(), findings, reps)}
	changes := h.tr.Update(round)
	events := h.links.Events(changes, round)
	alerts := h.tr.Incidents()
	if h.silence != nil {
		for i := range alerts {
			h.silence(&alerts[i])
		}
	}
	h.j.Observe(round, alerts, changes, events, now)
	return events
}

func storm(value float64) detect.Finding {
	return detect.Finding{Class: detect.PreemptStorm, Severity: detect.Critical, Replica: "r1", Model: "m", Summary: "storm",
		Evidence: []detect.Evidence{{Name: "retracted requests/s", Value: value, Baseline: 0.1, HasBaseline: true, Unit: "/s", Threshold: ">= 5x baseline"}}}
}

// play runs a storm from t0 for rounds rounds (10 s apart) with the
// values of value(i), then clear rounds without it.
func (h *harness) play(start time.Time, rounds, clear int, value func(i int) float64) time.Time {
	at := start
	for i := range rounds {
		h.round(at, storm(value(i)))
		at = at.Add(10 * time.Second)
	}
	for range clear {
		h.round(at)
		at = at.Add(10 * time.Second)
	}
	return at
}

func TestJournalKeepsTheIncidentAfterTheTrackerForgetsItAndAcrossRestarts(t *testing.T) {
	dir, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Options{Retention: 24 * time.Hour, MaxIncidents: 10, MaxPoints: 100, Store: dir})
	end := h.play(t0, 10, 80, func(i int) float64 { return float64(i + 1) })
	if len(h.tr.Incidents()) != 0 {
		t.Fatalf("the tracker still holds %+v; the test needs it to have forgotten the incident", h.tr.Incidents())
	}
	got := h.j.Incidents()
	if len(got) != 1 {
		t.Fatalf("journal: %d incidents, want 1", len(got))
	}
	r := got[0]
	if r.ID != alert.IncidentID(alert.Fingerprint("r1", detect.PreemptStorm), t0) || r.State != alert.StateResolved || r.Open() {
		t.Errorf("record %s state %s", r.ID, r.State)
	}
	if !r.FiredAt.Equal(t0.Add(30*time.Second)) || !r.ResolvedAt.Equal(t0.Add(150*time.Second)) {
		t.Errorf("fired %s resolved %s, want t0+30s and t0+150s (last seen t0+90s, keep firing 1m)", r.FiredAt, r.ResolvedAt)
	}
	if len(r.Signals) != 1 || len(r.Signals[0].Points) != 10 || r.Signals[0].Points[9].Value != 10 || !r.Signals[0].Points[0].HasBaseline {
		t.Errorf("signals %+v, want the 10 rounds' values with their baseline", r.Signals)
	}
	var kinds []EventKind
	for _, e := range r.Timeline {
		kinds = append(kinds, e.Kind)
	}
	if want := []EventKind{EventFirstFinding, EventFired, EventResolved}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("timeline %v, want %v", kinds, want)
	}
	// A restart: a new journal on the same state dir has the same record.
	again := New(Options{Retention: 24 * time.Hour, MaxIncidents: 10, MaxPoints: 100, Store: dir}, prometheus.NewRegistry(), end)
	if reloaded, ok := again.Incident(r.ID); !ok || !reflect.DeepEqual(jsonOf(t, reloaded), jsonOf(t, r)) {
		t.Errorf("after a restart: %v %s\nwant %s", ok, jsonOf(t, reloaded), jsonOf(t, r))
	}
	// Past the retention it is gone, from memory and from the document.
	h.round(r.ResolvedAt.Add(24 * time.Hour))
	if n := len(h.j.Incidents()); n != 0 {
		t.Errorf("past retention: %d incidents, want 0", n)
	}
	if n := len(New(Options{Retention: 24 * time.Hour, MaxIncidents: 10, Store: dir}, prometheus.NewRegistry(), end).Incidents()); n != 0 {
		t.Errorf("past retention, reloaded: %d incidents, want 0", n)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestJournalForgetsWhatClearedBeforeFiring(t *testing.T) {
	h := newHarness(t, Options{MaxIncidents: 10, MaxPoints: 100})
	h.play(t0, 2, 1, func(int) float64 { return 5 })
	if got := h.j.Incidents(); len(got) != 0 {
		t.Errorf("a blip that never paged is in the journal: %+v", got)
	}
}

func TestJournalKeepsAtMostMaxIncidentsDroppingTheOldestResolved(t *testing.T) {
	h := newHarness(t, Options{MaxIncidents: 2, MaxPoints: 100})
	at := t0
	var ids []string
	for range 3 {
		at = h.play(at, 5, 10, func(int) float64 { return 5 })
		ids = append(ids, h.j.Incidents()[0].ID)
	}
	got := h.j.Incidents()
	if len(got) != 2 || got[0].ID != ids[2] || got[1].ID != ids[1] {
		t.Errorf("incidents %v, want the newest two of %v, newest first", []string{got[0].ID, got[1].ID}, ids)
	}
}

func TestSignalsStayBoundedKeepingOnsetPeakAndFire(t *testing.T) {
	h := newHarness(t, Options{MaxIncidents: 10, MaxPoints: 16})
	// 100 rounds; the peak (1000) at round 57.
	h.play(t0, 100, 0, func(i int) float64 {
		if i == 57 {
			return 1000
		}
		return float64(i%7 + 1)
	})
	r := h.j.Incidents()[0]
	ps := r.Signals[0].Points
	if len(ps) > 16 || len(ps) < 8 {
		t.Fatalf("%d points, want between 8 and 16", len(ps))
	}
	has := func(at time.Time, v float64) bool {
		for _, p := range ps {
			if p.At.Equal(at) && p.Value == v {
				return true
			}
		}
		return false
	}
	if !has(t0, 1) || !has(t0.Add(570*time.Second), 1000) || !has(r.FiredAt, 4) || !has(t0.Add(990*time.Second), 2) {
		t.Errorf("thinned points lost the onset, peak, fire or last point: %+v", ps)
	}
	for i := 1; i < len(ps); i++ {
		if !ps[i].At.After(ps[i-1].At) {
			t.Fatalf("points out of order: %+v", ps)
		}
	}
}

func TestJournalRecordsDeliveriesSilencesAndConsequences(t *testing.T) {
	h := newHarness(t, Options{MaxIncidents: 10, MaxPoints: 100})
	var trigger notify.Event
	for i := range 4 {
		for _, ev := range h.round(t0.Add(time.Duration(i)*10*time.Second), storm(5)) {
			trigger = ev
		}
	}
	if trigger.Kind != notify.KindTrigger || trigger.Incident == "" {
		t.Fatalf("no trigger with an incident ID: %+v", trigger)
	}
	at := t0.Add(31 * time.Second)
	h.j.RecordAttempt(notify.Attempt{Integration: "slack", Event: trigger, Number: 1, At: at, Reason: notify.ReasonServerError})
	h.j.RecordAttempt(notify.Attempt{Integration: "slack", Event: trigger, Number: 2, At: at.Add(2 * time.Second), Delivered: true})
	h.j.RecordAttempt(notify.Attempt{Integration: "pagerduty", Event: trigger, Number: 1, At: at, Reason: notify.ReasonAuthError, GaveUp: true})
	h.j.RecordAttempt(notify.Attempt{Integration: "slack", Event: notify.Event{Fingerprint: "delivery-failure-x"}, Number: 1, At: at, Delivered: true})

	// A consequence joins; then a silence mutes it for two rounds.
	decode := detect.Finding{Class: detect.DecodeSlowdown, Severity: detect.Warning, Replica: "r1", Model: "m", Summary: "slow",
		Evidence: []detect.Evidence{{Name: "inter-token latency p99", Value: 0.5, Unit: "s"}}}
	h.round(t0.Add(40*time.Second), storm(5), decode)
	h.silence = func(a *alert.Incident) { a.SilencedBy = []string{"s-1"} }
	h.round(t0.Add(50*time.Second), storm(5), decode)
	h.silence = nil
	h.round(t0.Add(60*time.Second), storm(5), decode)

	r, ok := h.j.Incident(trigger.Incident)
	if !ok {
		t.Fatalf("no record %s", trigger.Incident)
	}
	want := []Delivery{
		{At: at, Integration: "pagerduty", Kind: "trigger", Attempt: 1, Error: "auth_error, gave up"},
		{At: at, Integration: "slack", Kind: "trigger", Attempt: 1, Error: "server_error"},
		{At: at.Add(2 * time.Second), Integration: "slack", Kind: "trigger", Attempt: 2, OK: true},
	}
	if !reflect.DeepEqual(r.Deliveries, want) {
		t.Errorf("deliveries %+v\nwant %+v", r.Deliveries, want)
	}
	var lines []string
	for _, e := range r.Timeline {
		lines = append(lines, string(e.Kind)+": "+e.Text)
	}
	for _, w := range []string{
		"delivery_failed: trigger not delivered to pagerduty: auth_error after 1 attempts",
		"notified: trigger delivered to slack (attempt 2)",
		"consequence_joined: decode_slowdown joined as a consequence of preempt_storm",
		"silenced: silenced by s-1",
		"unsilenced: silence s-1 no longer mutes it",
	} {
		if !strings.Contains(strings.Join(lines, "\n"), w) {
			t.Errorf("timeline lacks %q:\n%s", w, strings.Join(lines, "\n"))
		}
	}
	if !reflect.DeepEqual(r.Chain, []detect.Class{detect.PreemptStorm, detect.DecodeSlowdown}) {
		t.Errorf("chain %v", r.Chain)
	}
	names := map[string]bool{}
	for _, s := range r.Signals {
		names[s.Name] = true
	}
	if !names["retracted requests/s"] || !names["inter-token latency p99"] {
		t.Errorf("signals %v, want the cause's and the consequence's evidence", names)
	}
}

func TestIncidentAPI(t *testing.T) {
	h := newHarness(t, Options{MaxIncidents: 10, MaxPoints: 100})
	at := h.play(t0, 5, 10, func(int) float64 { return 5 }) // resolved
	h.play(at, 5, 0, func(int) float64 { return 5 })        // firing
	srv := httptest.NewServer(Handler(h.j, nil))
	defer srv.Close()
	getJSON := func(path string, want int, v any) string {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		if _, err := b.ReadFrom(resp.Body); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, b.String(), want)
		}
		if v != nil {
			if err := json.Unmarshal([]byte(b.String()), v); err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
		}
		return b.String()
	}
	var all, firing, other struct{ Incidents []Summary }
	getJSON("/api/v1/incidents", 200, &all)
	getJSON("/api/v1/incidents?state=firing", 200, &firing)
	getJSON("/api/v1/incidents?model=other", 200, &other)
	if len(all.Incidents) != 2 || all.Incidents[0].State != alert.StateFiring || all.Incidents[1].Postmortem == "" || all.Incidents[0].Postmortem != "" {
		t.Errorf("list %+v, want the firing one first, a postmortem link on the resolved one only", all.Incidents)
	}
	if len(firing.Incidents) != 1 || firing.Incidents[0].ID != all.Incidents[0].ID || len(other.Incidents) != 0 {
		t.Errorf("filters: firing %+v, model=other %+v", firing.Incidents, other.Incidents)
	}
	if body := getJSON("/api/v1/incidents?state=burning", 400, nil); !strings.Contains(body, "pending, firing or resolved") {
		t.Errorf("bad state filter: %s", body)
	}
	var rec Record
	getJSON("/api/v1/incidents/"+all.Incidents[1].ID, 200, &rec)
	if rec.ID != all.Incidents[1].ID || len(rec.Signals) == 0 {
		t.Errorf("one incident: %+v", rec)
	}
	getJSON("/api/v1/incidents/nope-1", 404, nil)
	if body := getJSON("/incidents/"+all.Incidents[0].ID+"/postmortem", 409, nil); !strings.Contains(body, "still firing") {
		t.Errorf("postmortem of a firing incident: %s", body)
	}
	if body := getJSON("/incidents/"+all.Incidents[1].ID+"/postmortem.md", 200, nil); !strings.HasPrefix(body, "# Incident: preempt storm on r1") {
		t.Errorf("postmortem.md: %s", body)
	}
}

// An incident spends the SLO events of its own replicas: while r1's storm
// runs, r2 of the same model misses the objective for reasons of its own,
// and those misses are not the storm's, though the storm's page carries
// the model's burn. A burn of the model standing alone spends the model's
// events, until its cause is found on a replica and the incident moves
// there.
func TestIncidentSpendsTheBudgetOfItsOwnReplicas(t *testing.T) {
	sli := func(total, good float64) []slo.Sample {
		return []slo.Sample{{Objective: "ttft", Model: "m", Events: slo.Events{Good: good, Total: total}}}
	}
	status := []slo.Status{{Objective: "ttft", Title: "TTFT ≤ 1s for 99%", Model: "m", Target: 0.99, Period: 24 * time.Hour,
		Held: 24 * time.Hour, PeriodEvents: slo.Events{Good: 99000, Total: 100000}}}
	burn := correlate.Burn{Finding: detect.Finding{Class: correlate.SLOBurn, Severity: detect.Critical,
		Replica: correlate.FleetReplica("m"), Model: "m", Summary: "burning"}, Headline: "burning"}
	for _, c := range []struct {
		name     string
		findings func(i int) []detect.Finding
		want     float64
		replicas []string
	}{
		{"the storm on r1", func(int) []detect.Finding { return []detect.Finding{storm(2)} }, 6 * 10, []string{"r1"}},
		{"the model's burn alone", func(int) []detect.Finding { return nil }, 6 * 70, []string{correlate.FleetReplica("m")}},
		{"the burn, then its cause on r1", func(i int) []detect.Finding {
			if i < 4 {
				return nil
			}
			return []detect.Finding{storm(2)}
		}, 4*70 + 2*10, []string{"r1"}},
	} {
		h := newHarness(t, Options{})
		for i := range 6 {
			at := t0.Add(time.Duration(i) * 10 * time.Second)
			round := assess.Round{At: at, Replicas: []assess.Replica{
				{Replica: detect.Replica{Name: "r1", Model: "m"}, SLI: sli(100, 90)},
				{Replica: detect.Replica{Name: "r2", Model: "m"}, SLI: sli(100, 40)},
			}, SLI: sli(200, 130), SLOs: status}
			groups := correlate.Correlate(correlate.DefaultConfig(), c.findings(i), []detect.Replica{{Name: "r1", Model: "m"}})
			round.Groups = correlate.FileBurns(groups, []correlate.Burn{burn})
			changes := h.tr.Update(round)
			h.j.Observe(round, h.tr.Incidents(), changes, h.links.Events(changes, round), at)
		}
		recs := h.j.Incidents()
		if len(recs) != 1 || len(recs[0].Budgets) != 1 || math.Abs(recs[0].Budgets[0].Allowed-1000) > 1e-6 {
			t.Fatalf("%s: %d incidents, budgets %+v; want one, against the model's 1000 allowed", c.name, len(recs), recs)
		}
		if got := recs[0].Budgets[0].Bad; got != c.want || !slices.Equal(recs[0].Replicas, c.replicas) || recs[0].Replica != c.replicas[0] {
			t.Errorf("%s (%s on %s, replicas %v): spent %v bad events, want %v on %v", c.name, recs[0].Class, recs[0].Replica, recs[0].Replicas, got, c.want, c.replicas)
		}
	}
}

// A cause found after its consequence paged leads the record's signals,
// as it leads the chain: the demo's storm page led its plots with the
// cache collapse's hit rate, under "what decided the finding", and the
// postmortem's root-cause table with it, while the headline named the
// storm's retractions.
func TestSignalsOfACauseFoundLaterComeFirst(t *testing.T) {
	h := newHarness(t, Options{MaxIncidents: 10, MaxPoints: 100})
	collapse := detect.Finding{Class: detect.CacheCollapse, Severity: detect.Critical, Replica: "r1", Model: "m", Summary: "collapse", Layer: detect.LayerMemory,
		Evidence: []detect.Evidence{{Name: "prefix cache hit rate", Value: 0.3, Baseline: 0.8, HasBaseline: true, Unit: "ratio", Threshold: "<= 0.5x baseline"}}}
	var id string
	for i := range 4 {
		for _, ev := range h.round(t0.Add(time.Duration(i)*10*time.Second), collapse) {
			id = ev.Incident
		}
	}
	for i := 4; i < 7; i++ {
		h.round(t0.Add(time.Duration(i)*10*time.Second), collapse, storm(float64(i)))
	}
	for i := 7; i < 20; i++ {
		h.round(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	r, ok := h.j.Incident(id)
	if !ok {
		t.Fatalf("no record %q", id)
	}
	var names []string
	for _, s := range r.Signals {
		names = append(names, s.Name)
	}
	if r.Open() || r.Class != detect.PreemptStorm || !slices.Equal(names, []string{"retracted requests/s", "prefix cache hit rate"}) {
		t.Errorf("incident %s (%s) with signals %q, want a resolved preempt_storm with its retractions first", r.Class, r.State, names)
	}
	if pm := Postmortem(r, func(string) (string, bool) { return "", false }); strings.Index(pm, "| retracted requests/s") > strings.Index(pm, "| prefix cache hit rate") {
		t.Errorf("the root-cause table does not lead with the cause's evidence:\n%s", pm)
	}
}

// How a cause ended lists other numbers than the ones it fired on: the
// demo's crash postmortem led its root-cause table with "seconds down",
// the recovery's evidence, instead of the failed scrapes that paged.
func TestSignalsOfHowACauseEndedDoNotTakeTheLead(t *testing.T) {
	h := newHarness(t, Options{MaxIncidents: 10, MaxPoints: 100})
	down := detect.Finding{Class: detect.ReplicaDown, Severity: detect.Critical, Replica: "r1", Model: "m", Summary: "down", Layer: detect.LayerProcess}
	var id string
	for i := range 5 {
		f := down
		f.Evidence = []detect.Evidence{{Name: "consecutive failed scrapes", Value: float64(3 + i), Threshold: ">= 3"}}
		for _, ev := range h.round(t0.Add(time.Duration(i)*10*time.Second), f) {
			id = ev.Incident
		}
	}
	back := down
	back.Resolving = true
	back.Evidence = []detect.Evidence{{Name: "seconds down", Value: 50, Unit: "s"}}
	h.round(t0.Add(50*time.Second), back)
	r, ok := h.j.Incident(id)
	if !ok || len(r.Signals) != 2 || r.Signals[0].Name != "consecutive failed scrapes" {
		t.Errorf("record %q (found %v) with signals %+v, want the failed scrapes first", id, ok, r.Signals)
	}
}
