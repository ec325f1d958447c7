package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Correlation changes in the middle of an incident — replicas joining a
// fleet incident a round apart, a fleet share hovering at the threshold, a
// cause found a round after the effect it explains was paged — are not
// recoveries. These tests run the real daemon (scrape, window, assess,
// alert tracker, dispatcher) against fake engines over an in-memory
// network in a testing/synctest bubble, and judge what the integrations
// received.

// flipConfig compresses time as configs/demo.yaml does: 1 s rounds,
// detector ranges of 20 s over baselines of 5 minutes, of which one must
// be covered before a ratio to it counts. The fleet rule is the default,
// stated: 3 of a model's 4 replicas make a fleet incident, 2 do not. The
// alerts' for is the test's.
const flipConfig = `
listen_address: "127.0.0.1:9402"
log_level: warn
scrape: {interval: 1s}
evaluation: {interval: 1s}
correlation: {fold_consequences: true, fleet_min_replicas: 3, fleet_fraction: 0.5}
detectors:
  cache_collapse: {range: 20s, baseline: 5m, min_prompt_tokens: 5000, restart_grace: 1m, baseline_coverage: {min_span_share: 0.2}}
  preempt_storm: {range: 20s, baseline: 5m, min_retractions_per_second: 0.05, baseline_coverage: {min_span_share: 0.2}}
  queue_latency: {range: 20s, baseline: 5m, baseline_coverage: {min_span_share: 0.2}}
  decode_slowdown: {range: 20s, baseline: 5m, baseline_coverage: {min_span_share: 0.2}}
  kv_saturation: {range: 20s, baseline: 5m, baseline_coverage: {min_span_share: 0.2}}
  retry_avalanche: {range: 20s, baseline: 5m}
  error_rate: {range: 20s}
alerts: {for: %s, keep_firing_for: 15s, resolved_retention: 30m, restore_grace: 30s, aftermath: 2m}
`

// flipWarmup is how long the fake fleet runs healthy first: past the
// baselines' required coverage (a minute) and the range.
const flipWarmup = 90 * time.Second

// script plays changes of the fake fleet at moments (bubble time since
// the daemon started) and keeps them as marks for the timeline. Moments
// fall between rounds (x.5 s), so which round first sees a change does
// not depend on scheduling.
type script struct {
	start time.Time
	marks map[time.Duration]string
}

func (s *script) at(d time.Duration, what string, do func()) {
	time.Sleep(time.Until(s.start.Add(d)))
	if do != nil {
		do()
	}
	if what != "" {
		if s.marks[d] != "" {
			what = s.marks[d] + "; " + what
		}
		s.marks[d] = what
	}
}

func withHitRate(v float64) func(*engineLoad) { return func(l *engineLoad) { l.HitRate = v } }

// TestFleetFlipNoResolveUntilTheConditionClears: a prefix-cache collapse
// (a router or prompt change) reaches replicas 0, 1 and 2 of a 4-replica
// model one evaluation round apart; then replica 2 comes and goes for
// minutes, so the fleet share hovers between 2 and 3 of 4 around the fleet
// threshold; then all recover. On-call gets the replica page sent before
// the fleet formed (replica 0's: alerts fire after 1 s here) and one fleet
// page, nothing more while the collapse goes on, no RESOLVED until it is
// over, and then exactly one resolve per page.
func TestFleetFlipNoResolveUntilTheConditionClears(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		names := []string{"r0", "r1", "r2", "r3"}
		engines := map[string]*fakeEngine{}
		for _, n := range names {
			engines[n] = newFakeEngine("org/model", healthyLoad())
		}
		run := startDaemon(t, fmt.Sprintf(flipConfig, "1s"), engines)
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		defer func() {
			if t.Failed() || testing.Verbose() {
				t.Logf("timeline (t = since the daemon started):\n%s\nlog:\n%s", run.timeline(s.marks), run.stderr.String())
			}
		}()

		onset := flipWarmup + 500*time.Millisecond
		for i, n := range names[:3] {
			s.at(onset+time.Duration(i)*time.Second, n+" prefix cache collapses", func() { engines[n].set(withHitRate(0.05)) })
		}
		// The detectors see the collapse once most of their 20 s range has it.
		s.at(onset+40*time.Second, "", nil)
		checkFindings(t, run, "collapse on 3 of 4", map[string]bool{"r0": true, "r1": true, "r2": true, "r3": false})

		// Replica 2 hovers: 30 s healthy, 30 s collapsed, twice. Each half
		// lasts longer than the detector needs to see the change (its
		// range), so the daemon's rounds flip between 2 and 3 of 4.
		hover := onset + time.Minute
		for k := range 2 {
			off := hover + time.Duration(2*k)*30*time.Second
			s.at(off, "r2 recovers (2 of 4)", func() { engines["r2"].set(withHitRate(0.8)) })
			s.at(off+25*time.Second, "", nil)
			checkFindings(t, run, fmt.Sprintf("hover %d, r2 healthy", k), map[string]bool{"r0": true, "r1": true, "r2": false, "r3": false})
			s.at(off+30*time.Second, "r2 collapses again (3 of 4)", func() { engines["r2"].set(withHitRate(0.05)) })
			s.at(off+55*time.Second, "", nil)
			checkFindings(t, run, fmt.Sprintf("hover %d, r2 collapsed", k), map[string]bool{"r0": true, "r1": true, "r2": true, "r3": false})
		}
		recovery := hover + 2*time.Minute
		s.at(recovery, "r0, r1, r2 recover", func() {
			for _, n := range names[:3] {
				engines[n].set(withHitRate(0.8))
			}
		})
		s.at(recovery+resolveBound+5*time.Second, "run stopped", nil)
		if err := run.stop(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
		for _, v := range checkFleetFlip(run.start, run.events(), recovery) {
			t.Error(v)
		}
	})
}

// checkFindings fails unless the daemon's last round shows a
// cache_collapse finding on exactly the replicas want says: the script
// really moved the fleet share across the threshold.
func checkFindings(t *testing.T, run *daemonRun, when string, want map[string]bool) {
	t.Helper()
	got := run.findings(t)
	for replica, collapsed := range want {
		if slices.Contains(got[replica], "cache_collapse") != collapsed {
			t.Errorf("%s: the daemon's round shows %s with findings %v, want cache_collapse %v", when, replica, got[replica], collapsed)
		}
	}
}

// resolveBound is how long after the recovery every page must have
// resolved: the detectors' 20 s range plus keep_firing_for 15 s, with
// room.
const resolveBound = time.Minute

// checkFleetFlip judges the events of the fleet flip: exactly one fleet
// page; replica pages only before it; no resolve before the recovery; one
// resolve per page after it, within resolveBound.
func checkFleetFlip(start time.Time, events []notify.Event, recovery time.Duration) []string {
	var out []string
	fail := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	at := func(ev notify.Event) time.Duration { return ev.At.Sub(start) }
	var fleet []notify.Event
	for _, ev := range events {
		if ev.Fleet && ev.Kind == notify.KindTrigger {
			fleet = append(fleet, ev)
		}
	}
	if len(fleet) != 1 {
		fail("%d fleet pages, want exactly 1", len(fleet))
	}
	triggers, resolves := map[string]int{}, map[string]int{}
	for _, ev := range events {
		switch ev.Kind {
		case notify.KindTrigger:
			triggers[ev.Fingerprint]++
			if !ev.Fleet && len(fleet) > 0 && !ev.At.Before(fleet[0].At) {
				fail("replica page at t+%s on %s after the fleet page at t+%s: %q", clock(at(ev)), ev.Replica, clock(at(fleet[0])), ev.Headline)
			}
			if ev.Replica == "r3" {
				fail("page on the healthy replica r3 at t+%s: %q", clock(at(ev)), ev.Headline)
			}
		case notify.KindResolve:
			resolves[ev.Fingerprint]++
			if at(ev) < recovery {
				fail("RESOLVED at t+%s, before the recovery at t+%s: %s %s %q", clock(at(ev)), clock(recovery), ev.Class, ev.Replica, ev.Headline)
			}
			if at(ev) > recovery+resolveBound {
				fail("RESOLVED at t+%s, more than %s after the recovery at t+%s: %s %s", clock(at(ev)), resolveBound, clock(recovery), ev.Class, ev.Replica)
			}
		}
	}
	for fp, n := range triggers {
		if n != 1 || resolves[fp] != 1 {
			fail("incident %s: %d triggers and %d resolves, want 1 and 1", fp, n, resolves[fp])
		}
	}
	for fp, n := range resolves {
		if triggers[fp] == 0 {
			fail("incident %s: %d resolves of a page never sent", fp, n)
		}
	}
	return out
}

// TestCauseAfterEffectIsRetitledInPlace: on one replica the queue builds
// first (time to first token 13x its baseline) and queue_latency pages;
// 20 s later the cause shows, a preempt storm (retractions with the KV
// pool full). On-call has one incident: the same PagerDuty dedup key and
// Slack thread, re-titled to the storm by an update (not a second
// trigger); it stays open while the storm runs and while the backlog it
// left drains, and resolves once, after everything cleared.
func TestCauseAfterEffectIsRetitledInPlace(t *testing.T) {
	causeAfterEffect(t, queueBuilds, 40*time.Second)
}

// TestCauseAfterEffectDecodeSlowdownFirst is the same with decode slowing
// first (inter-token latency 4x at the same batch): decode_slowdown pages,
// then yields to the storm it is a symptom of, and comes back while the
// decode stays slow after the storm.
func TestCauseAfterEffectDecodeSlowdownFirst(t *testing.T) {
	causeAfterEffect(t, decodeSlows, 40*time.Second)
}

// TestCauseAfterEffectLongStormStaysOpen is the queue-first incident with
// a storm that lasts 3 minutes at a constant rate: a storm that goes on is
// not over. Its page must stay open until the backlog has drained. The
// detectors themselves lose a storm once it fills the baseline just
// before their range (preempt_storm and queue_latency compare with it), so
// the rounds are not checked for them here: what holds the page is the KV
// saturation the storm keeps and the backlog it leaves.
func TestCauseAfterEffectLongStormStaysOpen(t *testing.T) {
	causeAfterEffectPages(t, queueBuilds, 3*time.Minute, false)
}

// firstEffect is the consequence of the storm that shows first.
type firstEffect struct {
	class string
	what  string
	// start makes the effect show; drain is the load after the storm,
	// while the effect lasts.
	start, drain func(*engineLoad)
	// duringStorm: the effect's detector still reports it while the storm
	// runs (decode_slowdown leaves storms to preempt_storm).
	duringStorm bool
}

var (
	queueBuilds = firstEffect{
		class: "queue_latency", what: "the queue builds (TTFT 4 s, 3.8 s of it queued), KV 85%",
		start: func(l *engineLoad) {
			l.Queued, l.Running, l.KVUsage = 60, 24, 0.85
			l.TTFT, l.QueueTime = 4, 3.8
		},
		drain: func(l *engineLoad) {
			l.RetractionsPerSecond, l.KVUsage, l.ITL = 0, 0.8, 0.02
			l.Queued = 30
		},
		duringStorm: true,
	}
	decodeSlows = firstEffect{
		class: "decode_slowdown", what: "decode slows (inter-token latency 80 ms, was 20 ms), same batch",
		start: func(l *engineLoad) { l.ITL = 0.08 },
		drain: func(l *engineLoad) { l.RetractionsPerSecond, l.KVUsage = 0, 0.8 },
	}
)

// causeAfterEffect plays one replica's incident: first the effect shows,
// 20 s later the storm that explains it (3 retractions/s, KV 98%) for
// stormFor, then 30 s during which the effect lasts. The detectors
// compare their range with the baseline just before it; the healthy
// warm-up (4 minutes) is long enough for a 40 s storm to stand out from it
// throughout. Along the way the test checks, in the daemon's rounds, that
// the detectors see what the script plays.
func causeAfterEffect(t *testing.T, effect firstEffect, stormFor time.Duration) {
	causeAfterEffectPages(t, effect, stormFor, true)
}

// causeAfterEffectPages plays the incident; checkRounds also checks, in
// the daemon's rounds, which detectors see it along the way.
func causeAfterEffectPages(t *testing.T, effect firstEffect, stormFor time.Duration, checkRounds bool) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		engine := newFakeEngine("org/model", healthyLoad())
		run := startDaemon(t, fmt.Sprintf(flipConfig, "5s"), map[string]*fakeEngine{"r0": engine})
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		defer func() {
			if t.Failed() || testing.Verbose() {
				t.Logf("timeline (t = since the daemon started):\n%s\nlog:\n%s", run.timeline(s.marks), run.stderr.String())
			}
		}()
		has := func(when string, want, not []string) {
			t.Helper()
			if !checkRounds {
				return
			}
			got := run.findings(t)["r0"]
			for _, c := range want {
				if !slices.Contains(got, c) {
					t.Errorf("%s: the daemon's round shows r0 with %v, want %s among them", when, got, c)
				}
			}
			for _, c := range not {
				if slices.Contains(got, c) {
					t.Errorf("%s: the daemon's round shows r0 with %v, want no %s", when, got, c)
				}
			}
		}

		first := 4*time.Minute + 500*time.Millisecond
		s.at(first, "r0: "+effect.what, func() { engine.set(effect.start) })
		storm := first + 20*time.Second
		s.at(storm-time.Second, "", nil)
		has("before the storm", []string{effect.class}, []string{"preempt_storm"})
		s.at(storm, "r0: preempt storm (3 retractions/s, KV 98%)", func() {
			engine.set(func(l *engineLoad) {
				l.RetractionsPerSecond, l.KVUsage, l.ITL = 3, 0.98, max(l.ITL, 0.06)
			})
		})
		for at := storm + 30*time.Second; at < storm+stormFor; at += 30 * time.Second {
			s.at(at, "", nil)
			want := []string{"preempt_storm"}
			if effect.duringStorm {
				want = append(want, effect.class)
			}
			has(fmt.Sprintf("%s into the storm", at-storm), want, nil)
		}
		calm := storm + stormFor
		s.at(calm, "r0: the storm ends, "+effect.class+" lasts", func() { engine.set(effect.drain) })
		s.at(calm+25*time.Second, "", nil)
		has("after the storm", []string{effect.class}, []string{"preempt_storm"})
		cleared := calm + 30*time.Second
		s.at(cleared, "r0: healthy again", func() { engine.set(func(l *engineLoad) { *l = healthyLoad() }) })
		s.at(cleared+resolveBound+5*time.Second, "run stopped", nil)
		if err := run.stop(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
		for _, v := range checkCauseAfterEffect(run.start, run.events(), effect.class, storm, cleared) {
			t.Error(v)
		}
	})
}

// checkCauseAfterEffect judges the events of the cause found after its
// effect: one incident, paged first as the effect before the storm,
// re-titled in place to preempt_storm by an update, resolved once after
// cleared and within resolveBound.
func checkCauseAfterEffect(start time.Time, events []notify.Event, effect string, storm, cleared time.Duration) []string {
	var out []string
	fail := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	at := func(ev notify.Event) time.Duration { return ev.At.Sub(start) }
	keys := map[string]bool{}
	var triggers, resolves []notify.Event
	retitled := false
	for _, ev := range events {
		keys[ev.Fingerprint] = true
		switch ev.Kind {
		case notify.KindTrigger:
			triggers = append(triggers, ev)
		case notify.KindResolve:
			resolves = append(resolves, ev)
			if at(ev) < cleared {
				fail("RESOLVED at t+%s, before everything cleared at t+%s: %s %q", clock(at(ev)), clock(cleared), ev.Class, ev.Headline)
			}
		case notify.KindUpdate:
			if ev.Class == "preempt_storm" && len(triggers) > 0 && ev.Fingerprint == triggers[0].Fingerprint {
				retitled = true
				if !strings.Contains(strings.ToLower(ev.Headline), "preempt") {
					fail("the update re-titling the incident does not name the storm: %q", ev.Headline)
				}
			}
		}
	}
	if len(keys) != 1 {
		fail("%d incidents (dedup keys), want 1", len(keys))
	}
	if len(triggers) != 1 {
		fail("%d triggers, want 1 (the cause re-titles the page in place)", len(triggers))
	} else if tr := triggers[0]; tr.Class != effect || at(tr) >= storm {
		fail("the first page is %s at t+%s, want %s before the storm at t+%s", tr.Class, clock(at(tr)), effect, clock(storm))
	}
	if !retitled {
		fail("no update re-titled the incident to preempt_storm under the same dedup key")
	}
	if len(resolves) != 1 {
		fail("%d resolves, want 1", len(resolves))
	}
	for _, ev := range resolves {
		if at(ev) > cleared+resolveBound {
			fail("RESOLVED at t+%s, more than %s after everything cleared at t+%s", clock(at(ev)), resolveBound, clock(cleared))
		}
	}
	return out
}

// TestFleetFlipCheck: the fleet flip's checks catch each way a timeline
// can depart from the story, and accept the story.
func TestFleetFlipCheck(t *testing.T) {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	recovery := 4 * time.Minute
	seq := map[string]uint64{}
	ev := func(kind notify.Kind, fp, replica string, fleet bool, at time.Duration) notify.Event {
		seq[fp]++
		return notify.Event{Kind: kind, Fingerprint: fp, Seq: seq[fp], Replica: replica, Fleet: fleet,
			Class: "cache_collapse", Severity: detect.Warning, At: start.Add(at)}
	}
	story := func() []notify.Event {
		clear(seq)
		return []notify.Event{
			ev(notify.KindTrigger, "r0", "r0", false, 102*time.Second),
			ev(notify.KindTrigger, "fleet", "fleet/org/model", true, 103*time.Second),
			ev(notify.KindResolve, "r0", "r0", false, recovery+17*time.Second),
			ev(notify.KindResolve, "fleet", "fleet/org/model", true, recovery+20*time.Second),
		}
	}
	for _, tc := range []struct {
		name string
		edit func([]notify.Event) []notify.Event
		want []string
	}{
		{name: "the story"},
		{
			name: "a replica page resolved when the fleet absorbs it",
			edit: func(es []notify.Event) []notify.Event {
				es[2].At = start.Add(104 * time.Second)
				return es
			},
			want: []string{"RESOLVED at t+1:44, before the recovery at t+4:00"},
		},
		{
			name: "the fleet share dropping to 2 of 4 resolves the fleet page and pages the replicas",
			edit: func(es []notify.Event) []notify.Event {
				return append(es,
					ev(notify.KindResolve, "fleet", "fleet/org/model", true, 150*time.Second),
					ev(notify.KindTrigger, "r1", "r1", false, 151*time.Second))
			},
			want: []string{"RESOLVED at t+2:30, before the recovery", "replica page at t+2:31 on r1 after the fleet page", "incident fleet: 1 triggers and 2 resolves", "incident r1: 1 triggers and 0 resolves"},
		},
		{
			name: "a second fleet page when the share comes back to 3 of 4",
			edit: func(es []notify.Event) []notify.Event {
				return append(es, ev(notify.KindTrigger, "fleet2", "fleet/org/model", true, 180*time.Second),
					ev(notify.KindResolve, "fleet2", "fleet/org/model", true, recovery+20*time.Second))
			},
			want: []string{"2 fleet pages, want exactly 1"},
		},
		{
			name: "a page never resolved",
			edit: func(es []notify.Event) []notify.Event { return es[:3] },
			want: []string{"incident fleet: 1 triggers and 0 resolves"},
		},
		{
			name: "a page resolved long after the recovery",
			edit: func(es []notify.Event) []notify.Event {
				es[3].At = start.Add(recovery + 2*time.Minute)
				return es
			},
			want: []string{"more than 1m0s after the recovery"},
		},
		{
			name: "no fleet page",
			edit: func(es []notify.Event) []notify.Event { return []notify.Event{es[0], es[2]} },
			want: []string{"0 fleet pages"},
		},
		{
			name: "the healthy replica paged",
			edit: func(es []notify.Event) []notify.Event {
				return append(es, ev(notify.KindTrigger, "r3", "r3", false, 90*time.Second),
					ev(notify.KindResolve, "r3", "r3", false, recovery+10*time.Second))
			},
			want: []string{"page on the healthy replica r3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := story()
			if tc.edit != nil {
				events = tc.edit(events)
			}
			checkDepartures(t, checkFleetFlip(start, events, recovery), tc.want)
		})
	}
}

// TestCauseAfterEffectCheck: the cause-after-effect checks catch each way
// a timeline can depart from the story, and accept the story.
func TestCauseAfterEffectCheck(t *testing.T) {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	storm, cleared := 4*time.Minute, 5*time.Minute
	seq := map[string]uint64{}
	ev := func(kind notify.Kind, fp, class string, at time.Duration, headline string) notify.Event {
		seq[fp]++
		return notify.Event{Kind: kind, Fingerprint: fp, Seq: seq[fp], Replica: "r0", Class: class,
			Severity: detect.Critical, At: start.Add(at), Headline: "r0: " + headline}
	}
	story := func() []notify.Event {
		clear(seq)
		return []notify.Event{
			ev(notify.KindTrigger, "k", "queue_latency", storm-15*time.Second, "TTFT p99 3.9s"),
			ev(notify.KindUpdate, "k", "preempt_storm", storm+2*time.Second, "Preemption storm: 0.2 retracted requests/s"),
			ev(notify.KindResolve, "k", "preempt_storm", cleared+17*time.Second, "preempt storm over after 1 min"),
		}
	}
	for _, tc := range []struct {
		name string
		edit func([]notify.Event) []notify.Event
		want []string
	}{
		{name: "the story"},
		{
			name: "the consequence resolved when its cause appears, the cause paged anew",
			edit: func(es []notify.Event) []notify.Event {
				return []notify.Event{es[0],
					ev(notify.KindResolve, "k", "queue_latency", storm+2*time.Second, "queue latency over"),
					ev(notify.KindTrigger, "k2", "preempt_storm", storm+2*time.Second, "Preemption storm"),
					ev(notify.KindResolve, "k2", "preempt_storm", cleared+17*time.Second, "preempt storm over")}
			},
			want: []string{"RESOLVED at t+4:02, before everything cleared at t+5:00", "2 incidents (dedup keys), want 1", "2 triggers, want 1",
				"no update re-titled the incident", "2 resolves, want 1"},
		},
		{
			name: "the incident resolved while the backlog drains",
			edit: func(es []notify.Event) []notify.Event {
				es[2].At = start.Add(cleared - 20*time.Second)
				return es
			},
			want: []string{"RESOLVED at t+4:40, before everything cleared"},
		},
		{
			name: "the consequence re-triggered during the drain",
			edit: func(es []notify.Event) []notify.Event {
				return append(es[:2], ev(notify.KindTrigger, "k", "queue_latency", cleared-20*time.Second, "TTFT p99 3.9s"), es[2])
			},
			want: []string{"2 triggers, want 1"},
		},
		{
			name: "the update keeps the consequence's headline",
			edit: func(es []notify.Event) []notify.Event {
				es[1].Headline = "r0: TTFT p99 3.9s"
				return es
			},
			want: []string{"does not name the storm"},
		},
		{
			name: "never resolved",
			edit: func(es []notify.Event) []notify.Event { return es[:2] },
			want: []string{"0 resolves, want 1"},
		},
		{
			name: "the cause paged first",
			edit: func(es []notify.Event) []notify.Event {
				es[0].Class = "preempt_storm"
				es[0].At = start.Add(storm + time.Second)
				return es
			},
			want: []string{"the first page is preempt_storm at t+4:01, want queue_latency before the storm"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := story()
			if tc.edit != nil {
				events = tc.edit(events)
			}
			checkDepartures(t, checkCauseAfterEffect(start, events, "queue_latency", storm, cleared), tc.want)
		})
	}
}

// checkDepartures fails unless got holds exactly one departure per want,
// each containing its want.
func checkDepartures(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d departures, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
			t.Errorf("no departure says %q; got:\n%s", w, strings.Join(got, "\n"))
		}
	}
}
