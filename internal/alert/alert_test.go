package alert

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func finding(replica string, class detect.Class, sev detect.Severity) detect.Finding {
	return detect.Finding{Class: class, Severity: sev, Replica: replica, Model: "m", Summary: string(class) + " on " + replica,
		Evidence: []detect.Evidence{{Name: "x", Value: 2, Baseline: 1, HasBaseline: true}}}
}

// pager is the tracker with the links its pages carry: what the
// evaluation loop does with a round, silences aside.
type pager struct {
	*Tracker
	links Links
}

func newPager(cfg Config, links Links) *pager { return &pager{NewTracker(cfg), links} }

// Update applies the round and returns its pages as events.
func (p *pager) Update(round assess.Round) []notify.Event {
	return p.links.Events(p.Tracker.Update(round), round)
}

// Retire retires replicas and returns the pages as events.
func (p *pager) Retire(gone func(string) bool, reason string, now time.Time) []notify.Event {
	return p.links.Events(p.Tracker.Retire(gone, reason, now), assess.Round{At: now})
}

// update runs one round of findings through the correlation, as the
// assessment does, then the tracker.
func update(tr *pager, findings []detect.Finding, now time.Time) []notify.Event {
	return tr.Update(roundOf(now, findings...))
}

func roundOf(now time.Time, findings ...detect.Finding) assess.Round {
	var reps []detect.Replica
	seen := map[string]bool{}
	for _, f := range findings {
		if !seen[f.Replica] {
			seen[f.Replica] = true
			reps = append(reps, detect.Replica{Name: f.Replica, Model: f.Model})
		}
	}
	return assess.Round{At: now, Groups: correlate.Correlate(correlate.DefaultConfig(), findings, reps)}
}

func testConfig() Config {
	return Config{
		Timing:            Timing{For: 30 * time.Second, KeepFiringFor: time.Minute},
		RepeatInterval:    time.Hour,
		ResolvedRetention: 10 * time.Minute,
		RestoreGrace:      5 * time.Minute,
	}
}

func kinds(evs []notify.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Kind)+":"+e.Class+"@"+e.Replica)
	}
	return out
}

// step runs the tracker every 10 s from start for n rounds with the findings
// fn returns, collecting every event.
func step(tr *pager, start time.Time, n int, fn func(i int) []detect.Finding) []notify.Event {
	var all []notify.Event
	for i := 0; i < n; i++ {
		all = append(all, update(tr, fn(i), start.Add(time.Duration(i)*10*time.Second))...)
	}
	return all
}

func TestLifecyclePendingFiringResolved(t *testing.T) {
	tr := newPager(testConfig(), Links{ExternalURL: "http://wd:9402"})
	storm := finding("r1", detect.PreemptStorm, detect.Critical)

	// Pending for < for: no event.
	if evs := step(tr, t0, 3, func(int) []detect.Finding { return []detect.Finding{storm} }); len(evs) != 0 {
		t.Fatalf("events while pending: %v", kinds(evs))
	}
	if a := tr.Incidents(); len(a) != 1 || a[0].State != StatePending {
		t.Fatalf("want one pending alert, got %+v", a)
	}
	// At t0+30s it fires once.
	evs := update(tr, []detect.Finding{storm}, t0.Add(30*time.Second))
	if len(evs) != 1 || evs[0].Kind != notify.KindTrigger || evs[0].Status != notify.StatusFiring {
		t.Fatalf("want one trigger, got %v", kinds(evs))
	}
	trig := evs[0]
	if trig.Fingerprint != Fingerprint("r1", detect.PreemptStorm) || trig.Seq != 1 {
		t.Errorf("trigger identity: %+v", trig)
	}
	if trig.RunbookURL != "http://wd:9402/runbooks/preempt_storm" || trig.AlertURL != "http://wd:9402/incidents/"+IncidentID(trig.Fingerprint, t0) || trig.Incident != IncidentID(trig.Fingerprint, t0) {
		t.Errorf("links: %q %q", trig.RunbookURL, trig.AlertURL)
	}
	if len(trig.Evidence) != 1 || !trig.Evidence[0].HasBase {
		t.Errorf("evidence not carried: %+v", trig.Evidence)
	}
	// Still present: no repeat before the repeat interval.
	if evs := update(tr, []detect.Finding{storm}, t0.Add(40*time.Second)); len(evs) != 0 {
		t.Fatalf("unexpected %v", kinds(evs))
	}
	// Gone for less than keep_firing_for: still firing, no event.
	if evs := update(tr, nil, t0.Add(90*time.Second)); len(evs) != 0 {
		t.Fatalf("resolved inside hysteresis: %v", kinds(evs))
	}
	// Gone for keep_firing_for since last seen (t0+40s): resolves.
	evs = update(tr, nil, t0.Add(100*time.Second))
	if len(evs) != 1 || evs[0].Kind != notify.KindResolve || evs[0].Status != notify.StatusResolved || evs[0].Seq != 2 {
		t.Fatalf("want resolve seq 2, got %+v", evs)
	}
	if !evs[0].EndsAt.Equal(t0.Add(100*time.Second)) || !evs[0].StartsAt.Equal(t0.Add(30*time.Second)) {
		t.Errorf("times: starts %v ends %v", evs[0].StartsAt, evs[0].EndsAt)
	}
	if want := trig.AlertURL + "/postmortem"; evs[0].PostmortemURL != want || trig.PostmortemURL != "" {
		t.Errorf("postmortem link: trigger %q, resolve %q, want none then %q", trig.PostmortemURL, evs[0].PostmortemURL, want)
	}
	// Kept for retention, then forgotten.
	if a := tr.Incidents(); len(a) != 1 || a[0].State != StateResolved {
		t.Fatalf("resolved alert not retained: %+v", a)
	}
	update(tr, nil, t0.Add(100*time.Second+10*time.Minute))
	if a := tr.Incidents(); len(a) != 0 {
		t.Fatalf("resolved alert not dropped after retention: %+v", a)
	}
}

func TestBlipNeverPages(t *testing.T) {
	tr := newPager(testConfig(), Links{})
	evs := step(tr, t0, 20, func(i int) []detect.Finding {
		if i%4 == 0 { // present one round in four: never 30 s in a row
			return []detect.Finding{finding("r1", detect.CacheCollapse, detect.Warning)}
		}
		return nil
	})
	if len(evs) != 0 {
		t.Fatalf("a blip paged: %v", kinds(evs))
	}
}

func TestHysteresisKeepsFlappingConditionAsOneIncident(t *testing.T) {
	tr := newPager(testConfig(), Links{})
	evs := step(tr, t0, 60, func(i int) []detect.Finding {
		// Steady for 1 minute, then flapping on/off every 20 s.
		if i < 6 || (i/2)%2 == 0 {
			return []detect.Finding{finding("r1", detect.PreemptStorm, detect.Critical)}
		}
		return nil
	})
	if got := kinds(evs); len(got) != 1 || got[0] != "trigger:preempt_storm@r1" {
		t.Fatalf("flapping produced %v, want a single trigger", got)
	}
}

func TestEscalationAndRepeat(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	cfg.RepeatInterval = time.Minute
	tr := newPager(cfg, Links{})
	evs := step(tr, t0, 13, func(i int) []detect.Finding {
		sev := detect.Warning
		if i >= 3 {
			sev = detect.Critical
		}
		return []detect.Finding{finding("r1", detect.ReplicaDown, sev)}
	})
	got := kinds(evs)
	want := []string{"trigger:replica_down@r1", "update:replica_down@r1", "repeat:replica_down@r1"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("got %v want %v", got, want)
	}
	if evs[1].Severity != detect.Critical {
		t.Errorf("escalation event severity %q", evs[1].Severity)
	}
	// A severity drop does not re-page.
	if e := update(tr, []detect.Finding{finding("r1", detect.ReplicaDown, detect.Warning)}, t0.Add(125*time.Second)); len(e) != 0 {
		t.Errorf("de-escalation paged: %v", kinds(e))
	}
}

func TestCauseAndEffectOnOneReplicaPageOnce(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := newPager(cfg, Links{})
	evs := update(tr, []detect.Finding{
		finding("r1", detect.PreemptStorm, detect.Critical),
		finding("r1", detect.CacheCollapse, detect.Warning),
		finding("r2", detect.PreemptStorm, detect.Critical), // other replica: its own incident
	}, t0)
	if got := strings.Join(kinds(evs), ","); got != sortedKinds("trigger:cache_collapse@r1", "trigger:preempt_storm@r2") {
		t.Fatalf("got %s", got)
	}
	for _, e := range evs {
		if e.Replica == "r1" && (len(e.Explains) != 1 || e.Explains[0] != "preempt_storm" || e.Severity != detect.Critical) {
			t.Errorf("r1 collapse: explains %v, severity %s; want the storm it causes, critical", e.Explains, e.Severity)
		}
		if e.Replica == "r2" && len(e.Explains) != 0 {
			t.Errorf("r2 explains another replica's findings: %v", e.Explains)
		}
	}
}

// sortedKinds orders expected kinds as Update orders events: by fingerprint.
func sortedKinds(ks ...string) string {
	fp := func(k string) string {
		class, replica, _ := strings.Cut(k[strings.Index(k, ":")+1:], "@")
		return Fingerprint(replica, detect.Class(class))
	}
	sort.Slice(ks, func(i, j int) bool { return fp(ks[i]) < fp(ks[j]) })
	return strings.Join(ks, ",")
}

func TestConsequenceFiredFirstIsRetitledInPlaceWhenItsCauseAppears(t *testing.T) {
	cfg := testConfig()
	tr := newPager(cfg, Links{})
	queue := finding("r1", detect.QueueLatency, detect.Critical)
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	var evs []notify.Event
	// The queue grows before retractions cross their threshold: queue
	// latency pages first.
	evs = append(evs, step(tr, t0, 4, func(int) []detect.Finding { return []detect.Finding{queue} })...)
	if len(evs) != 1 || evs[0].Kind != notify.KindTrigger || evs[0].Class != "queue_latency" {
		t.Fatalf("want the queue latency trigger, got %v", kinds(evs))
	}
	fp := evs[0].Fingerprint
	// Then the storm: one update of the same incident, named after it.
	evs = step(tr, t0.Add(40*time.Second), 6, func(int) []detect.Finding { return []detect.Finding{queue, storm} })
	if len(evs) != 1 || evs[0].Kind != notify.KindUpdate || evs[0].Class != "preempt_storm" || evs[0].Fingerprint != fp {
		t.Fatalf("want one update re-titling incident %s as preempt_storm, got %v", fp, kinds(evs))
	}
	if len(evs[0].Explains) != 1 || evs[0].Explains[0] != "queue_latency" {
		t.Errorf("re-titled incident does not list the queue latency it explains: %v", evs[0].Explains)
	}
	// The storm ends while the backlog drains: no resolve, no new page.
	evs = step(tr, t0.Add(100*time.Second), 20, func(int) []detect.Finding { return []detect.Finding{queue} })
	if len(evs) != 0 {
		t.Fatalf("the drain paged: %v", kinds(evs))
	}
	if a := tr.Incidents(); len(a) != 1 || a[0].State != StateFiring || a[0].Class != detect.PreemptStorm || !a[0].Draining {
		t.Fatalf("want the storm incident open and draining, got %+v", a)
	}
	// The backlog is gone: one resolve after keep_firing_for.
	evs = step(tr, t0.Add(300*time.Second), 10, func(int) []detect.Finding { return nil })
	if len(evs) != 1 || evs[0].Kind != notify.KindResolve || evs[0].Fingerprint != fp {
		t.Fatalf("want one resolve of %s, got %v", fp, kinds(evs))
	}
}

func TestPendingConsequenceAndLaterCauseFireOnce(t *testing.T) {
	tr := newPager(testConfig(), Links{})
	queue := finding("r1", detect.QueueLatency, detect.Warning)
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	evs := step(tr, t0, 2, func(int) []detect.Finding { return []detect.Finding{queue} })
	evs = append(evs, step(tr, t0.Add(20*time.Second), 6, func(int) []detect.Finding { return []detect.Finding{queue, storm} })...)
	if len(evs) != 1 || evs[0].Kind != notify.KindTrigger || evs[0].Class != "preempt_storm" || evs[0].Severity != detect.Critical {
		t.Fatalf("want one critical storm trigger, got %v", kinds(evs))
	}
	if !evs[0].StartsAt.Equal(t0.Add(30 * time.Second)) {
		t.Errorf("the incident's for began at its first symptom: fired at %s", evs[0].StartsAt.Sub(t0))
	}
}

func TestFleetIncidentAbsorbsReplicaAlertsWithoutResolvingThem(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := newPager(cfg, Links{})
	reps := []detect.Replica{{Name: "m-0", Model: "m"}, {Name: "m-1", Model: "m"}, {Name: "m-2", Model: "m"}, {Name: "m-3", Model: "m"}}
	round := func(now time.Time, on ...int) assess.Round {
		var fs []detect.Finding
		for _, i := range on {
			fs = append(fs, finding(reps[i].Name, detect.CacheCollapse, detect.Warning))
		}
		return assess.Round{At: now, Groups: correlate.Correlate(correlate.DefaultConfig(), fs, reps)}
	}
	var evs []notify.Event
	// One replica degrades, then a second, a round apart: a replica page,
	// then the fleet page once three of the four show it.
	evs = append(evs, tr.Update(round(t0, 0))...)
	evs = append(evs, tr.Update(round(t0.Add(10*time.Second), 0, 1))...)
	evs = append(evs, tr.Update(round(t0.Add(20*time.Second), 0, 1, 2))...)
	// The share hovers around the threshold for minutes.
	for i := 3; i < 30; i++ {
		on := []int{0, 1, 2}
		if i%2 == 0 {
			on = []int{0, 1}
		}
		evs = append(evs, tr.Update(round(t0.Add(time.Duration(i)*10*time.Second), on...))...)
	}
	var triggers, resolves []string
	for _, e := range evs {
		switch e.Kind {
		case notify.KindTrigger:
			triggers = append(triggers, e.Replica)
		case notify.KindResolve:
			resolves = append(resolves, e.Replica)
		}
	}
	if strings.Join(triggers, ",") != "m-0,m-1,fleet/m" {
		t.Errorf("triggers %v: want the two replica pages before the fleet formed, then one fleet page", triggers)
	}
	if len(resolves) != 0 {
		t.Fatalf("resolved while nothing recovered: %v", resolves)
	}
	// Everything recovers: the fleet incident and the absorbed replica
	// alerts resolve, once each.
	evs = nil
	for i := 30; i < 40; i++ {
		evs = append(evs, tr.Update(round(t0.Add(time.Duration(i)*10*time.Second)))...)
	}
	for _, e := range evs {
		if e.Kind != notify.KindResolve {
			t.Errorf("unexpected %s for %s", e.Kind, e.Replica)
		}
		resolves = append(resolves, e.Replica)
	}
	sort.Strings(resolves)
	if strings.Join(resolves, ",") != "fleet/m,m-0,m-1" {
		t.Fatalf("resolves %v", resolves)
	}
}

func TestRestoreContinuesIncidentAndResolvesIfGone(t *testing.T) {
	cfg := testConfig()
	tr := newPager(cfg, Links{})
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	step(tr, t0, 4, func(int) []detect.Finding { return []detect.Finding{storm} })
	saved := tr.Snapshot()
	if len(saved) != 1 {
		t.Fatalf("snapshot: %+v", saved)
	}

	// Restart 1: still firing -> no new trigger, sequence continues.
	restart := t0.Add(10 * time.Minute)
	tr2 := newPager(cfg, Links{})
	tr2.Restore(saved, restart)
	evs := step(tr2, restart, 10, func(i int) []detect.Finding {
		if i < 3 { // windows empty right after restart
			return nil
		}
		return []detect.Finding{storm}
	})
	if len(evs) != 0 {
		t.Fatalf("restart re-paged a still-firing incident: %v", kinds(evs))
	}

	// Restart 2: the incident ended while down -> resolved after the grace,
	// with the original fingerprint and the next sequence number.
	tr3 := newPager(cfg, Links{})
	tr3.Restore(saved, restart)
	if e := update(tr3, nil, restart.Add(time.Minute)); len(e) != 0 {
		t.Fatalf("resolved inside restore grace: %v", kinds(e))
	}
	evs = update(tr3, nil, restart.Add(cfg.RestoreGrace))
	if len(evs) != 1 || evs[0].Kind != notify.KindResolve || evs[0].Fingerprint != saved[0].Fingerprint || evs[0].Seq != saved[0].Seq+1 {
		t.Fatalf("want resolve of the restored incident, got %+v", evs)
	}
}

func TestRetireResolvesRemovedTargets(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := newPager(cfg, Links{})
	update(tr, []detect.Finding{finding("a", detect.ReplicaDown, detect.Critical), finding("b", detect.ReplicaDown, detect.Critical)}, t0)
	evs := tr.Retire(func(r string) bool { return r == "a" }, "target removed", t0.Add(time.Second))
	if len(evs) != 1 || evs[0].Replica != "a" || evs[0].Status != notify.StatusResolved || !strings.HasPrefix(evs[0].Summary, "target removed") {
		t.Fatalf("retire: %+v", evs)
	}
}

func TestFingerprintStable(t *testing.T) {
	// Pinned: the fingerprint is a PagerDuty dedup key; changing it would
	// orphan open incidents across an upgrade.
	if got := Fingerprint("sim-0", detect.PreemptStorm); got != Fingerprint("sim-0", detect.PreemptStorm) || len(got) != 16 {
		t.Fatalf("fingerprint %q", got)
	}
	if Fingerprint("a", detect.PreemptStorm) == Fingerprint("a", detect.CacheCollapse) || Fingerprint("ab", "c") == Fingerprint("a", "bc") {
		t.Fatal("fingerprint collision")
	}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	cfg := Config{Timing: Timing{For: -1}, ResolvedRetention: -1, Classes: map[string]Timing{"preempt_storm": {KeepFiringFor: -1}}}
	err := cfg.Validate("alerts")
	for _, want := range []string{"alerts.for", "alerts.resolved_retention", "alerts.classes.preempt_storm.keep_firing_for"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	if err := DefaultConfig().Validate("alerts"); err != nil {
		t.Errorf("defaults invalid: %v", err)
	}
}

func TestEvictionCollapseIsExplainedByTheStormNotTheReverse(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := newPager(cfg, Links{})
	collapse := finding("r1", detect.CacheCollapse, detect.Warning)
	collapse.Layer = detect.LayerMemory // hit rate fell because KV pressure evicts prefixes
	evs := update(tr, []detect.Finding{finding("r1", detect.PreemptStorm, detect.Critical), collapse}, t0)
	if len(evs) != 1 || evs[0].Class != "preempt_storm" || len(evs[0].Explains) != 1 || evs[0].Explains[0] != "cache_collapse" {
		t.Fatalf("want one storm page explaining the eviction collapse, got %v %+v", kinds(evs), evs)
	}
}

func TestRestoreIncidentsFromNotifierRecords(t *testing.T) {
	cfg := testConfig()
	tr := newPager(cfg, Links{})
	restart := t0.Add(time.Hour)
	open := []notify.Event{{Fingerprint: Fingerprint("r9", detect.PreemptStorm), Seq: 4, Kind: notify.KindTrigger, Status: notify.StatusFiring,
		Class: "preempt_storm", Severity: detect.Critical, Replica: "r9", StartsAt: t0, At: t0}}
	if n := tr.RestoreIncidents(open, restart); n != 1 {
		t.Fatalf("restored %d", n)
	}
	if n := tr.RestoreIncidents(open, restart); n != 0 {
		t.Fatalf("restored a known incident twice")
	}
	evs := update(tr, nil, restart.Add(cfg.RestoreGrace))
	if len(evs) != 1 || evs[0].Kind != notify.KindResolve || evs[0].Seq != 5 || evs[0].Fingerprint != open[0].Fingerprint || !evs[0].StartsAt.Equal(t0) {
		t.Fatalf("want the original incident resolved, got %+v", evs)
	}
}

func TestLayerTriageReachesThePage(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := newPager(cfg, Links{})
	f := finding("r1", "queue_latency", detect.Warning)
	f.Layer, f.Triage = detect.LayerQueue, "admission bottleneck: 8 running, 47 waiting. Next step: raise --max-running-requests"
	evs := update(tr, []detect.Finding{f}, t0)
	if len(evs) != 1 || evs[0].Triage != f.Triage || evs[0].Layer != "queue" {
		t.Fatalf("event %+v", evs)
	}
	if text := notify.FormatText(evs[0]); !strings.Contains(text, "Next step: raise --max-running-requests") {
		t.Errorf("log page lacks the triage:\n%s", text)
	}
}

func TestResolveKeepsThePagedSeverityAndSaysWhatEnded(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := newPager(cfg, Links{})
	crit := finding("r1", detect.PreemptStorm, detect.Critical)
	crit.Summary = "Preemption storm: 3 retracted requests/s"
	warn := crit
	warn.Severity = detect.Warning
	warn.Summary = "Preemption storm: 0.2 retracted requests/s"
	evs := update(tr, []detect.Finding{crit}, t0)
	evs = append(evs, update(tr, []detect.Finding{warn}, t0.Add(10*time.Second))...)
	// The minute's snapshot still holds the storm's tail; the resolve
	// says what the replica is now.
	queued, ttft, tailQueued, tailTTFT := 3.0, 0.4, 40.0, 5.0
	round := assess.Round{At: t0.Add(90 * time.Second), Replicas: []assess.Replica{{Replica: detect.Replica{Name: "r1"}, Scrape: detect.ScrapeState{Up: true},
		Snapshot: assess.Snapshot{QueuedRequests: &tailQueued, TTFTP99: &tailTTFT},
		Recent:   assess.Snapshot{QueuedRequests: &queued, TTFTP99: &ttft, ObservedSeconds: 15}}}}
	evs = append(evs, tr.Update(round)...)
	if len(evs) != 2 || evs[1].Kind != notify.KindResolve {
		t.Fatalf("got %v", kinds(evs))
	}
	res := evs[1]
	if res.Severity != detect.Critical {
		t.Errorf("resolve severity %s, want the critical the incident paged at", res.Severity)
	}
	if res.Headline != "r1: Preemption storm over after 1 min 30 s; now queue 3, p99 TTFT 0.4 s" {
		t.Errorf("resolve headline %q", res.Headline)
	}
	if len(res.Recovered) == 0 || len(res.Evidence) == 0 {
		t.Errorf("resolve without recovered values %v or peak evidence %v", res.Recovered, res.Evidence)
	}
	if text := notify.FormatText(res); !strings.Contains(text, "recovered (last 15 s, peak):") {
		t.Errorf("resolve does not say what its values cover:\n%s", text)
	}
}

// The resolve's "while it fired" is the cause at its worst round: the
// last round before a storm ends is its mildest, and a page that says the
// storm was 0.2 retracted requests/s understates what on-call answered.
// A renamed incident is described by its new cause, even when the symptom
// it was first named after scored worse; a detector that says how its
// condition ended (Finding.Resolving) is heard instead.
func TestResolveSaysTheCauseAtItsWorst(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	resolveOf := func(t *testing.T, rounds ...[]detect.Finding) notify.Event {
		t.Helper()
		tr := newPager(cfg, Links{})
		var evs []notify.Event
		for i, fs := range rounds {
			evs = append(evs, update(tr, fs, t0.Add(time.Duration(i)*10*time.Second))...)
		}
		evs = append(evs, step(tr, t0.Add(time.Duration(len(rounds))*10*time.Second), 8, func(int) []detect.Finding { return nil })...)
		if len(evs) == 0 || evs[len(evs)-1].Kind != notify.KindResolve {
			t.Fatalf("no resolve: %v", kinds(evs))
		}
		return evs[len(evs)-1]
	}
	storm := func(sev detect.Severity, rate float64) detect.Finding {
		f := finding("r1", detect.PreemptStorm, sev)
		f.Summary = fmt.Sprintf("Preemption storm: %v retracted requests/s", rate)
		f.Evidence = []detect.Evidence{{Name: "retracted requests/s", Value: rate, Baseline: 0.01, HasBaseline: true, Unit: "/s"}}
		return f
	}
	res := resolveOf(t, []detect.Finding{storm(detect.Warning, 0.3)}, []detect.Finding{storm(detect.Critical, 3)},
		[]detect.Finding{storm(detect.Critical, 1)}, []detect.Finding{storm(detect.Warning, 0.2)})
	if res.Diagnosis != "Preemption storm: 3 retracted requests/s" {
		t.Errorf("while it fired: %q, want the storm at its worst (3/s)", res.Diagnosis)
	}

	// replica_down's last finding says how the outage ended: the resolve
	// says it after the outage at its worst, each under its own name
	// (the demo's crash resolve read "while it fired: Replica serves
	// again ...").
	down := finding("r1", detect.ReplicaDown, detect.Critical)
	down.Summary = "Replica down: 40 consecutive scrapes failed (refused)"
	down.Evidence = []detect.Evidence{{Name: "consecutive failed scrapes", Value: 40, Threshold: ">= 3"}}
	back := down
	back.Resolving = true
	back.Summary = "Replica serves again after 4s down; it came back after a restart (possible crash/OOM)"
	back.Evidence = []detect.Evidence{{Name: "seconds down", Value: 4, Unit: "s"}}
	res = resolveOf(t, []detect.Finding{down}, []detect.Finding{down}, []detect.Finding{back})
	if want := down.Summary + ". How it ended: " + back.Summary + "."; res.Diagnosis != want {
		t.Errorf("outage resolves with %q, want %q", res.Diagnosis, want)
	}

	queue := finding("r1", detect.QueueLatency, detect.Critical)
	queue.Summary = "TTFT p99 30 s (baseline 0.3 s)"
	queue.Evidence = []detect.Evidence{{Name: "TTFT p99", Value: 30, Baseline: 0.3, HasBaseline: true, Unit: "s"}}
	res = resolveOf(t, []detect.Finding{queue}, []detect.Finding{queue, storm(detect.Critical, 0.5)},
		[]detect.Finding{queue, storm(detect.Warning, 0.1)})
	if res.Class != string(detect.PreemptStorm) || res.Diagnosis != "Preemption storm: 0.5 retracted requests/s" {
		t.Errorf("renamed incident resolves as %s, while it fired: %q; want preempt_storm at its worst (0.5/s)", res.Class, res.Diagnosis)
	}

	// The peaks are every signal the incident's findings carried, each at
	// its worst, not one round's: the demo's storm, renamed from the
	// prefix-cache collapse it explains, resolved under "KV cache 100%
	// full" with the collapse round's average KV usage (91%) as the peak
	// and no peak of retractions at all.
	collapse := finding("r1", detect.CacheCollapse, detect.Critical)
	collapse.Layer = detect.LayerMemory // eviction under KV pressure: the storm explains it
	collapse.Evidence = []detect.Evidence{
		{Name: "prefix cache hit rate", Value: 0.33, Baseline: 0.815, HasBaseline: true, Unit: "ratio"},
		{Name: "KV cache usage (avg)", Value: 0.91, Baseline: 0.11, HasBaseline: true, Unit: "ratio"},
	}
	full := storm(detect.Critical, 0.3)
	full.Evidence[0].Baseline = 0 // as the demo's: no retractions before
	full.Evidence = append(full.Evidence, detect.Evidence{Name: "KV cache usage (max in range)", Value: 0.999, Threshold: ">= 90%", Unit: "ratio"})
	res = resolveOf(t, []detect.Finding{collapse}, []detect.Finding{collapse, storm(detect.Critical, 0.05)}, []detect.Finding{full})
	var lines []string
	for _, r := range notify.Recoveries(res) {
		lines = append(lines, r.Text())
	}
	if got, want := strings.Join(lines, "; "), "retracted requests/s: peak 0.3/s; KV cache usage (max in range): peak 99.9%; "+
		"prefix cache hit rate: lowest 33%"; got != want {
		t.Errorf("renamed storm resolves with peaks %q, want %q", got, want)
	}
}

// A resolve gives the worst users felt beside the values now where the
// evidence gives no peak of them: the demo's GPU-throttle resolve read
// "now queue 0, p99 TTFT 0.099 s" and nothing of the 9.76 s its pages had
// carried. Where the evidence gives one too, the worse of the two is the
// one number: no page of the incident said worse than its resolve's peak.
func TestResolveGivesTheWorstUsersFelt(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	round := func(now time.Time, fs []detect.Finding, queued, ttft float64) assess.Round {
		r := roundOf(now, fs...)
		snap := assess.Snapshot{QueuedRequests: &queued, TTFTP99: &ttft}
		r.Replicas = []assess.Replica{{Replica: detect.Replica{Name: "r1", Model: "m"}, Scrape: detect.ScrapeState{Up: true}, Snapshot: snap, Recent: snap}}
		return r
	}
	resolveOf := func(t *testing.T, f detect.Finding) notify.Event {
		t.Helper()
		tr := newPager(cfg, Links{})
		var evs []notify.Event
		for i, felt := range [][2]float64{{2, 3.1}, {50.8, 9.76}, {20, 5}} {
			evs = append(evs, tr.Update(round(t0.Add(time.Duration(i)*10*time.Second), []detect.Finding{f}, felt[0], felt[1]))...)
		}
		for i := 3; i < 20 && evs[len(evs)-1].Kind != notify.KindResolve; i++ {
			evs = append(evs, tr.Update(round(t0.Add(time.Duration(i)*10*time.Second), nil, 0, 0.099))...)
		}
		if res := evs[len(evs)-1]; res.Kind == notify.KindResolve {
			return res
		}
		t.Fatalf("no resolve: %v", kinds(evs))
		return notify.Event{}
	}
	gpu := finding("r1", detect.GPUThrottled, detect.Warning)
	if got, want := notify.Title(resolveOf(t, gpu)), "now queue 0, p99 TTFT 0.099 s (peak queue 50.8, p99 TTFT 9.76 s)"; !strings.HasSuffix(got, want) {
		t.Errorf("resolve title %q, want it to end %q", got, want)
	}
	queued := finding("r1", detect.GPUThrottled, detect.Warning)
	queued.Evidence = []detect.Evidence{{Name: "queued requests (avg over 20s)", Value: 30, Baseline: 2, HasBaseline: true}}
	if got, want := notify.Title(resolveOf(t, queued)), "(peak queue 50.8, p99 TTFT 9.76 s)"; !strings.HasSuffix(got, want) {
		t.Errorf("resolve title %q, want it to end %q", got, want)
	}
	queued.Evidence[0].Value = 80
	if got, want := notify.Title(resolveOf(t, queued)), "(peak queue 80, p99 TTFT 9.76 s)"; !strings.HasSuffix(got, want) {
		t.Errorf("resolve title %q, want it to end %q", got, want)
	}
}

func TestConsequenceAfterItsCauseResolvedIsTheDrainNotANewPage(t *testing.T) {
	cfg := testConfig()
	cfg.Aftermath = 3 * time.Minute
	tr := newPager(cfg, Links{})
	retry := finding("r1", detect.RetryAvalanche, detect.Critical)
	queue := finding("r1", detect.QueueLatency, detect.Critical)
	evs := step(tr, t0, 10, func(int) []detect.Finding { return []detect.Finding{retry} })
	evs = append(evs, step(tr, t0.Add(100*time.Second), 7, func(int) []detect.Finding { return nil })...)
	if got := strings.Join(kinds(evs), ","); got != "trigger:retry_avalanche@r1,resolve:retry_avalanche@r1" {
		t.Fatalf("got %s", got)
	}
	resolvedAt := t0.Add(160 * time.Second)
	// The latency tail of the avalanche shows up after its resolve and
	// fades within the aftermath: nothing pages.
	evs = step(tr, resolvedAt.Add(10*time.Second), 12, func(int) []detect.Finding { return []detect.Finding{queue} })
	evs = append(evs, step(tr, resolvedAt.Add(130*time.Second), 3, func(int) []detect.Finding { return nil })...)
	if len(evs) != 0 {
		t.Fatalf("the drain paged: %v", kinds(evs))
	}
	// A queue latency that outlasts the aftermath is its own incident.
	evs = step(tr, resolvedAt.Add(160*time.Second), 6, func(int) []detect.Finding { return []detect.Finding{queue} })
	if len(evs) != 1 || evs[0].Kind != notify.KindTrigger || evs[0].Class != "queue_latency" || !strings.Contains(evs[0].Diagnosis, "not that incident's drain") {
		t.Fatalf("want the persisting queue latency paged after the aftermath, got %v", kinds(evs))
	}
	if at := evs[0].At.Sub(resolvedAt); at < cfg.Aftermath {
		t.Errorf("paged %s after the resolve, inside the aftermath", at)
	}
	// The cause itself coming back pages as usual.
	tr2 := newPager(cfg, Links{})
	step(tr2, t0, 10, func(int) []detect.Finding { return []detect.Finding{retry} })
	step(tr2, t0.Add(100*time.Second), 7, func(int) []detect.Finding { return nil })
	evs = step(tr2, resolvedAt.Add(10*time.Second), 4, func(int) []detect.Finding { return []detect.Finding{retry} })
	if len(evs) != 1 || evs[0].Kind != notify.KindTrigger {
		t.Fatalf("a returning cause did not page: %v", kinds(evs))
	}
}

func TestHeadlineSaysWhatUsersFeelOnceAndOnlyWhenFresh(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	queued, ttft, aborts := 294.0, 8.1, 0.0
	snap := assess.Snapshot{QueuedRequests: &queued, TTFTP99: &ttft, AbortsPerSecond: &aborts}
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	storm.Summary = "requests being preempted 0.6/s, KV cache full"
	latency := finding("r2", detect.QueueLatency, detect.Critical)
	latency.Summary = "TTFT p99 8.1 s (baseline 0.3 s)"
	down := finding("r3", detect.ReplicaDown, detect.Critical)
	down.Summary = "unreachable: 3 scrapes refused"
	// The evidence gives the queue over the detector's span: the
	// headline gives that number, not the snapshot's, another one for it.
	overload := finding("r4", detect.ErrorRate, detect.Critical)
	overload.Summary = "8.8% of requests failing over 20s"
	overload.Evidence = []detect.Evidence{{Name: "queued requests (avg over 20s)", Value: 1.85}}
	// A gateway's queue in the same incident is not this replica's.
	behind := finding("r5", detect.DecodeSlowdown, detect.Critical)
	behind.Summary = "Decode slowdown: inter-token latency p99 0.2 s"
	behind.Evidence = []detect.Evidence{detect.Evidence{Name: "queued requests (avg over 20s)", Value: 40}.Of("router")}
	// A colon in the field's own name does not make it another replica's.
	retry := finding("r6", detect.RetryAvalanche, detect.Critical)
	retry.Summary = "Retry avalanche: 3 of 12 requests/s are retries"
	retry.Evidence = []detect.Evidence{{Name: "queued requests (baseline: half a range earlier)", Value: 20.6, Baseline: 2.6, HasBaseline: true}}
	// An SLO burn on the page names the objective's TTFT threshold, not
	// the p99 users feel: the headline still gives that.
	burning := finding("r7", detect.PreemptStorm, detect.Critical)
	burning.Summary = `Preemption storm: 3 retracted requests/s; burning the TTFT ≤ 1s for 99% SLO "chat" at 33x over 10m and 50x over 4m`
	round := roundOf(t0, storm, latency, down, overload, behind, retry, burning)
	round.Replicas = []assess.Replica{
		{Replica: detect.Replica{Name: "r1"}, Scrape: detect.ScrapeState{Up: true}, Snapshot: snap},
		{Replica: detect.Replica{Name: "r2"}, Scrape: detect.ScrapeState{Up: true}, Snapshot: snap},
		{Replica: detect.Replica{Name: "r3"}, Scrape: detect.ScrapeState{Up: false}, Snapshot: snap},
		{Replica: detect.Replica{Name: "r4"}, Scrape: detect.ScrapeState{Up: true}, Snapshot: snap},
		{Replica: detect.Replica{Name: "r5"}, Scrape: detect.ScrapeState{Up: true}, Snapshot: snap},
		{Replica: detect.Replica{Name: "r6"}, Scrape: detect.ScrapeState{Up: true}, Snapshot: snap},
		{Replica: detect.Replica{Name: "r7"}, Scrape: detect.ScrapeState{Up: true}, Snapshot: snap},
	}
	want := map[string]string{
		"r1": "r1: requests being preempted 0.6/s, KV cache full; queue 294, p99 TTFT 8.1 s",
		"r2": "r2: TTFT p99 8.1 s (baseline 0.3 s); queue 294",
		"r3": "r3: unreachable: 3 scrapes refused",
		"r4": "r4: 8.8% of requests failing over 20s; queue 1.85, p99 TTFT 8.1 s",
		"r5": "r5: Decode slowdown: inter-token latency p99 0.2 s; queue 294, p99 TTFT 8.1 s",
		"r6": "r6: Retry avalanche: 3 of 12 requests/s are retries; queue 20.6, p99 TTFT 8.1 s",
		"r7": `r7: Preemption storm: 3 retracted requests/s; burning the TTFT ≤ 1s for 99% SLO "chat" at 33x over 10m and 50x over 4m; queue 294, p99 TTFT 8.1 s`,
	}
	evs := newPager(cfg, Links{}).Update(round)
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d", len(evs), len(want))
	}
	for _, ev := range evs {
		if ev.Headline != want[ev.Replica] {
			t.Errorf("%s headline %q, want %q", ev.Replica, ev.Headline, want[ev.Replica])
		}
	}
}

func TestResolveWaitsForTheBacklogTheIncidentBuilt(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	cfg.Aftermath = 5 * time.Minute
	tr := newPager(cfg, Links{})
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	update(tr, []detect.Finding{storm}, t0)
	backlog := func(now time.Time, waiting bool) assess.Round {
		return assess.Round{At: now, Replicas: []assess.Replica{{Replica: detect.Replica{Name: "r1"}, Scrape: detect.ScrapeState{Up: true},
			Triage: detect.TriageResult{Verdict: detect.TriageAdmission, WaitingHigh: waiting}}}}
	}
	// The storm's finding is gone but requests still wait: no resolve.
	for i := 1; i <= 12; i++ {
		if evs := tr.Update(backlog(t0.Add(time.Duration(i)*10*time.Second), true)); len(evs) != 0 {
			t.Fatalf("resolved at +%ds with a backlog: %v", i*10, kinds(evs))
		}
	}
	if evs := tr.Update(backlog(t0.Add(130*time.Second), false)); len(evs) != 1 || evs[0].Kind != notify.KindResolve {
		t.Fatalf("want the resolve once the queue drained, got %v", kinds(evs))
	}
	// A queue that never drains holds the resolve only for the aftermath.
	tr = newPager(cfg, Links{})
	update(tr, []detect.Finding{storm}, t0)
	var evs []notify.Event
	for i := 1; i <= 40; i++ {
		evs = append(evs, tr.Update(backlog(t0.Add(time.Duration(i)*10*time.Second), true))...)
	}
	if len(evs) != 1 || evs[0].At.Sub(t0) != cfg.Aftermath {
		t.Fatalf("want one resolve when the aftermath ends, got %v", kinds(evs))
	}
}

// The replica's target labels (namespace, team) reach every event of its
// incident, the resolve included when the replica is gone from the round,
// and survive a restart through the notifiers' records.
func TestTargetLabelsReachEveryEventOfTheIncident(t *testing.T) {
	tr := newPager(testConfig(), Links{ExternalURL: "http://wd:9402"})
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	labels := map[string]string{"namespace": "llm-prod", "team": "inference"}
	withReplica := func(now time.Time) assess.Round {
		r := roundOf(now, storm)
		r.Replicas = []assess.Replica{{Replica: detect.Replica{Name: "r1", Model: "m", Labels: labels}, Scrape: detect.ScrapeState{Up: true}}}
		return r
	}
	var evs []notify.Event
	for i := 0; i <= 3; i++ {
		evs = append(evs, tr.Update(withReplica(t0.Add(time.Duration(i)*10*time.Second)))...)
	}
	if len(evs) != 1 || evs[0].Kind != notify.KindTrigger || evs[0].Labels["team"] != "inference" || evs[0].Labels["namespace"] != "llm-prod" {
		t.Fatalf("trigger: %v labels %v", kinds(evs), evs)
	}
	restored := newPager(testConfig(), Links{ExternalURL: "http://wd:9402"})
	restored.RestoreIncidents(evs, t0.Add(time.Minute))
	for _, tracker := range []*pager{tr, restored} {
		var resolve []notify.Event
		for i := 1; i <= 40 && len(resolve) == 0; i++ {
			resolve = tracker.Update(roundOf(t0.Add(time.Minute + time.Duration(i)*10*time.Second)))
		}
		if len(resolve) != 1 || resolve[0].Kind != notify.KindResolve || resolve[0].Labels["team"] != "inference" {
			t.Errorf("resolve with the replica gone: %v %+v", kinds(resolve), resolve)
		}
	}
}
