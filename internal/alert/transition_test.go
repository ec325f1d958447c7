package alert

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// changes runs the tracker every 10 s from start for n rounds with the
// findings fn returns and collects every transition.
func changes(tr *Tracker, start time.Time, n int, fn func(i int) []detect.Finding) []Transition {
	var all []Transition
	for i := range n {
		all = append(all, tr.Update(roundOf(start.Add(time.Duration(i)*10*time.Second), fn(i)...))...)
	}
	return all
}

// story is "change[page]@class" for every transition but Seen.
func story(ts []Transition) string {
	var out []string
	for _, t := range ts {
		if t.Change == Seen {
			continue
		}
		s := string(t.Change)
		if t.Page != "" {
			s += "[" + string(t.Page) + "]"
		}
		out = append(out, s+"@"+string(t.Incident.Class))
	}
	return strings.Join(out, " ")
}

// One incident's life, as its transitions: opened, fired (the trigger),
// seen every round it shows, resolved (the resolve); the pages ride on
// the transitions that call for them and nowhere else.
func TestTransitionsOfOneIncident(t *testing.T) {
	tr := NewTracker(testConfig())
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	ts := changes(tr, t0, 5, func(int) []detect.Finding { return []detect.Finding{storm} })
	ts = append(ts, changes(tr, t0.Add(50*time.Second), 8, func(int) []detect.Finding { return nil })...)
	if got, want := story(ts), "opened@preempt_storm fired[trigger]@preempt_storm resolved[resolve]@preempt_storm"; got != want {
		t.Fatalf("story %q, want %q", got, want)
	}
	seen := 0
	for _, x := range ts {
		if x.Change == Seen {
			seen++
			if x.Group.Cause() != detect.PreemptStorm || x.Page != "" {
				t.Errorf("seen carries group %s, page %q", x.Group.Cause(), x.Page)
			}
		}
	}
	if seen != 5 {
		t.Errorf("seen in %d rounds, want the 5 that showed it", seen)
	}
	fired := ts[slices.IndexFunc(ts, func(x Transition) bool { return x.Change == Fired })]
	if fired.Incident.State != StateFiring || fired.Incident.Seq != 1 || !fired.At.Equal(t0.Add(30*time.Second)) {
		t.Errorf("fired transition holds %+v at %s", fired.Incident, fired.At)
	}
}

// A blip that clears while pending is dropped, never paged.
func TestPendingBlipIsDropped(t *testing.T) {
	tr := NewTracker(testConfig())
	ts := changes(tr, t0, 3, func(i int) []detect.Finding {
		if i == 0 {
			return []detect.Finding{finding("r1", detect.PreemptStorm, detect.Critical)}
		}
		return nil
	})
	if got := story(ts); got != "opened@preempt_storm dropped@preempt_storm" {
		t.Fatalf("story %q", got)
	}
}

// A consequence paged first is renamed after its cause (the update rides
// on the Renamed transition, which says what it was called); a rise of
// severity while firing is an escalation, with the severity it had.
func TestRenameAndEscalationAreTransitionsWithTheirPage(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := NewTracker(cfg)
	queue := finding("r1", detect.QueueLatency, detect.Warning)
	storm := finding("r1", detect.PreemptStorm, detect.Warning)
	ts := tr.Update(roundOf(t0, queue))
	ts = tr.Update(roundOf(t0.Add(10*time.Second), queue, storm))
	if got := story(ts); got != "renamed[update]@preempt_storm" {
		t.Fatalf("story %q", got)
	}
	if ts[0].FromClass != detect.QueueLatency {
		t.Errorf("renamed from %s", ts[0].FromClass)
	}
	storm.Severity = detect.Critical
	ts = tr.Update(roundOf(t0.Add(20*time.Second), queue, storm))
	if got := story(ts); got != "escalated[update]@preempt_storm" || ts[0].FromSeverity != detect.Warning || ts[0].Incident.Severity != detect.Critical {
		t.Fatalf("story %q from %s", got, ts[0].FromSeverity)
	}
}

// A class that joins an open incident later is a Joined transition; what
// the incident held when it opened is not.
func TestJoinedNamesTheClassesThatJoinedLater(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := NewTracker(cfg)
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	queue := finding("r1", detect.QueueLatency, detect.Warning)
	if got := story(tr.Update(roundOf(t0, storm))); got != "opened@preempt_storm fired[trigger]@preempt_storm" {
		t.Fatalf("story %q", got)
	}
	ts := tr.Update(roundOf(t0.Add(10*time.Second), storm, queue))
	if got := story(ts); got != "joined@preempt_storm" || !slices.Equal(ts[0].Classes, []detect.Class{detect.QueueLatency}) {
		t.Fatalf("story %q, classes %v", got, ts[0].Classes)
	}
}

// A fleet incident taking in the replica incidents paged before it is an
// Absorbed transition on the fleet incident naming each; they page
// nothing more until it ends.
func TestFleetIncidentAbsorbsAsTransitions(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := NewTracker(cfg)
	reps := []detect.Replica{{Name: "m-0", Model: "m"}, {Name: "m-1", Model: "m"}, {Name: "m-2", Model: "m"}}
	round := func(now time.Time, on ...int) assess.Round {
		var fs []detect.Finding
		for _, i := range on {
			fs = append(fs, finding(reps[i].Name, detect.CacheCollapse, detect.Warning))
		}
		return assess.Round{At: now, Groups: correlate.Correlate(correlate.DefaultConfig(), fs, reps)}
	}
	tr.Update(round(t0, 0))
	ts := tr.Update(round(t0.Add(10*time.Second), 0, 1, 2))
	var absorbed []string
	for _, x := range ts {
		if x.Change == Absorbed {
			if !x.Incident.Fleet || x.Other.AbsorbedBy != x.Incident.Fingerprint || x.Other.AbsorbedByID != x.Incident.ID {
				t.Errorf("absorbed %+v into %+v", x.Other, x.Incident)
			}
			absorbed = append(absorbed, x.Other.Replica)
		}
		if x.Page != "" && !x.Incident.Fleet {
			t.Errorf("a replica incident paged while the fleet formed: %s", story([]Transition{x}))
		}
	}
	if !slices.Equal(absorbed, []string{"m-0"}) {
		t.Errorf("absorbed %v, want the replica incident that had fired", absorbed)
	}
}

// Each incident gets at most one page a round, and every paging
// transition renders to one event of that kind.
func TestAtMostOnePagePerIncidentPerRound(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	cfg.RepeatInterval = 10 * time.Second
	tr := NewTracker(cfg)
	queue := finding("r1", detect.QueueLatency, detect.Warning)
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	links := Links{ExternalURL: "http://wd"}
	for i, fs := range [][]detect.Finding{{queue}, {queue, storm}, {queue, storm}, {storm}} {
		round := roundOf(t0.Add(time.Duration(i)*10*time.Second), fs...)
		ts := tr.Update(round)
		pages := map[string]int{}
		for _, x := range ts {
			if x.Page != "" {
				pages[x.Incident.Fingerprint]++
			}
		}
		for fp, n := range pages {
			if n > 1 {
				t.Errorf("round %d: %d pages for %s: %s", i, n, fp, story(ts))
			}
		}
		for _, ev := range links.Events(ts, round) {
			if ev.Kind == "" || ev.Headline == "" || ev.AlertURL == "" {
				t.Errorf("round %d: event %+v", i, ev)
			}
		}
	}
	if ev := links.Event(Transition{Page: notify.KindRepeat, Incident: tr.Incidents()[0], At: t0}, assess.Round{}); ev.Kind != notify.KindRepeat {
		t.Errorf("event kind %s", ev.Kind)
	}
}

// The baselines a member finding compared against when it joined the
// incident are frozen and handed back as references while the incident
// is open, across a restart; later rounds' baselines do not replace them,
// and a resolved incident hands back nothing.
func TestBaselinesFreezeAtOnsetForTheIncidentsLife(t *testing.T) {
	cfg := testConfig()
	tr := NewTracker(cfg)
	collapse := finding("r1", detect.CacheCollapse, detect.Warning)
	collapse.Baselines = map[string]float64{"hit_rate": 0.8}
	tr.Update(roundOf(t0, collapse))
	later := collapse
	later.Baselines = map[string]float64{"hit_rate": 0.05} // a baseline that absorbed the incident
	changes(tr, t0.Add(10*time.Second), 6, func(int) []detect.Finding { return []detect.Finding{later} })
	ref, ok := tr.References()["r1"][detect.CacheCollapse]
	if !ok || ref.Source != detect.Frozen || ref.Values["hit_rate"] != 0.8 || !ref.Since.Equal(t0) {
		t.Fatalf("reference %+v (%v), want hit_rate 0.8 frozen at the onset", ref, ok)
	}
	restored := NewTracker(cfg)
	restored.Restore(tr.Snapshot(), t0.Add(time.Hour))
	if ref := restored.References()["r1"][detect.CacheCollapse]; ref.Values["hit_rate"] != 0.8 {
		t.Errorf("after a restart: %+v", ref)
	}
	changes(tr, t0.Add(70*time.Second), 8, func(int) []detect.Finding { return nil })
	if refs := tr.References(); len(refs) != 0 {
		t.Errorf("a resolved incident still hands back %+v", refs)
	}
}

// A warning incident whose consequence has users failing escalates to
// critical, also while its cause has cleared and only the consequence is
// left: the update carries the higher severity and, draining, says what
// users see now under the cause's name.
func TestConsequenceWithUsersFailingEscalatesADrainingIncident(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	tr := newPager(cfg, Links{})
	storm := finding("r1", detect.PreemptStorm, detect.Warning)
	storm.Summary = "Preemption storm: 2 retracted requests/s"
	storm.RootCause = []string{"lower the batch cap"}
	outage := finding("r1", detect.ErrorRate, detect.Critical)
	outage.Summary = "100% of requests failing over 2m"
	outage.Emergency = []string{"take the replica out of rotation"}
	evs := update(tr, []detect.Finding{storm}, t0)
	if len(evs) != 1 || evs[0].Severity != detect.Warning {
		t.Fatalf("trigger %v", kinds(evs))
	}
	evs = update(tr, []detect.Finding{outage}, t0.Add(10*time.Second))
	if len(evs) != 1 || evs[0].Kind != notify.KindUpdate || evs[0].Severity != detect.Critical || evs[0].Class != "preempt_storm" {
		t.Fatalf("want one critical update of the storm incident, got %v %+v", kinds(evs), evs)
	}
	ev := evs[0]
	if !ev.Draining || ev.Summary != outage.Summary || !slices.Equal(ev.Emergency, outage.Emergency) || !slices.Contains(ev.RootCause, "lower the batch cap") {
		t.Errorf("the draining page does not say what users see now: summary %q, steps %v / %v", ev.Summary, ev.Emergency, ev.RootCause)
	}
	if evs := update(tr, []detect.Finding{outage}, t0.Add(20*time.Second)); len(evs) != 0 {
		t.Errorf("the same impact paged again: %v", kinds(evs))
	}
}

// A class joining a firing incident pages one update at once; more growth
// within update_interval waits for it; a fall of impact pages nothing.
// Users failing are the exception: the first round they join, the
// headline leads with them, and that pages at once whatever paged before.
func TestImpactGrowthPagesRateLimitedUpdates(t *testing.T) {
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	queue := finding("r1", detect.QueueLatency, detect.Critical)
	decode := finding("r1", detect.DecodeSlowdown, detect.Critical)
	errs := finding("r1", detect.ErrorRate, detect.Critical)
	for _, c := range []struct {
		name   string
		rounds [][]detect.Finding
		want   []string
	}{
		{"growth waits", [][]detect.Finding{
			{storm}, {storm, queue}, {storm, queue, decode}, {storm, queue, decode}, {storm, queue, decode},
			{storm, queue, decode}, {storm, queue, decode}, {storm}, {storm},
		}, []string{"trigger@0s", "update@20s", "update@1m20s"}},
		{"users failing do not wait", [][]detect.Finding{
			{storm}, {storm, queue}, {storm, queue, errs}, {storm, queue, errs}, {storm, queue, errs, decode},
			{storm, queue, errs, decode}, {storm, queue, errs, decode}, {storm}, {storm},
		}, []string{"trigger@0s", "update@20s", "update@40s", "update@1m40s"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.For = 0
			cfg.UpdateInterval = time.Minute
			tr := newPager(cfg, Links{})
			var got []string
			for i, fs := range c.rounds {
				for _, ev := range update(tr, fs, t0.Add(time.Duration(i)*20*time.Second)) {
					got = append(got, string(ev.Kind)+"@"+ev.At.Sub(t0).String())
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("pages %v, want %v", got, c.want)
			}
		})
	}
}

// A rename (the cause found a moment after its consequence paged) takes
// nothing from the growth updates' budget: failures joining a minute
// later page at once, and more growth then waits update_interval. An
// escalation does take from it: a class joining just after waits.
func TestRenameDoesNotHoldBackGrowth(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	cfg.UpdateInterval = 5 * time.Minute
	tr := newPager(cfg, Links{})
	queue := finding("r1", detect.QueueLatency, detect.Critical)
	storm := finding("r1", detect.PreemptStorm, detect.Critical)
	errs := finding("r1", detect.ErrorRate, detect.Critical)
	kv := finding("r1", detect.KVSaturation, detect.Critical)
	got := pagesEvery(tr, 30*time.Second, [][]detect.Finding{{queue}, {queue, storm}, {queue, storm}, {queue, storm, errs}, {queue, storm, errs, kv}},
		func(ev notify.Event) string { return ev.Class })
	want := []string{"trigger@0s/queue_latency", "update@30s/preempt_storm", "update@1m30s/preempt_storm"}
	if !slices.Equal(got, want) {
		t.Errorf("pages %v, want %v: the rename at once, the failures a minute later at once, the next growth held", got, want)
	}

	tr = newPager(cfg, Links{})
	warn := finding("r1", detect.PreemptStorm, detect.Warning)
	got = pagesEvery(tr, 30*time.Second, [][]detect.Finding{{warn}, {warn, errs}, {warn, errs, kv}},
		func(ev notify.Event) string { return ev.Severity.String() })
	want = []string{"trigger@0s/warning", "update@30s/critical"}
	if !slices.Equal(got, want) {
		t.Errorf("pages %v, want %v: the escalation at once, the class joining after it held", got, want)
	}
}

// pagesEvery updates tr with one round of findings every step from t0 and
// returns its pages as kind@offset/label.
func pagesEvery(tr *pager, step time.Duration, rounds [][]detect.Finding, label func(notify.Event) string) []string {
	var out []string
	for i, fs := range rounds {
		for _, ev := range update(tr, fs, t0.Add(time.Duration(i)*step)) {
			out = append(out, string(ev.Kind)+"@"+ev.At.Sub(t0).String()+"/"+label(ev))
		}
	}
	return out
}

// A consequence that feeds on itself joining a firing incident pages at
// once, even within update_interval of the last update: the page must
// lead with it (its name in the headline, its steps first).
func TestSelfSustainingConsequencePagesAtOnce(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	cfg.UpdateInterval = time.Hour
	tr := newPager(cfg, Links{})
	slow := finding("r1", detect.DecodeSlowdown, detect.Critical)
	errs := finding("r1", detect.ErrorRate, detect.Critical)
	loop := finding("r1", detect.RetryAvalanche, detect.Critical)
	loop.Emergency = []string{"stop the client retries"}
	var last notify.Event
	got := pagesEvery(tr, 20*time.Second, [][]detect.Finding{{slow}, {slow, errs}, {slow, errs, loop}, {slow, errs, loop}},
		func(ev notify.Event) string { last = ev; return ev.Severity.String() })
	if want := []string{"trigger@0s/critical", "update@20s/critical", "update@40s/critical"}; !slices.Equal(got, want) {
		t.Fatalf("pages %v, want %v: the retry loop joining pages at once, within update_interval of the last update", got, want)
	}
	if !slices.Contains(last.Sustaining, detect.Title(detect.RetryAvalanche)) || len(last.Emergency) == 0 || last.Emergency[0] != "stop the client retries" {
		t.Errorf("the update does not lead with the loop: sustaining %v, steps %v", last.Sustaining, last.Emergency)
	}
}

// An incident restored after a restart, not seen again, is continued only
// by its own class: a consequence a cause of its kind would explain
// (aborts after the storm ended while the daemon was down) is a new
// incident, and the restored one resolves when its grace ends.
func TestRestoredIncidentDoesNotAbsorbWhatComesAfter(t *testing.T) {
	cfg := testConfig()
	cfg.For = 0
	old := newPager(cfg, Links{})
	update(old, []detect.Finding{finding("r1", detect.PreemptStorm, detect.Critical)}, t0)
	tr := newPager(cfg, Links{})
	restart := t0.Add(time.Hour)
	tr.Restore(old.Snapshot(), restart)
	errs := finding("r1", detect.ErrorRate, detect.Critical)
	var evs []notify.Event
	for i := 0; i <= int(cfg.RestoreGrace/(10*time.Second)); i++ {
		evs = append(evs, update(tr, []detect.Finding{errs}, restart.Add(time.Duration(i)*10*time.Second))...)
	}
	var classes []string
	for _, ev := range evs {
		classes = append(classes, string(ev.Kind)+":"+ev.Class)
	}
	if !slices.Equal(classes, []string{"trigger:error_rate", "resolve:preempt_storm"}) {
		t.Errorf("pages %v: want the failures paged as their own incident and the restored storm resolved at its grace", classes)
	}
}
