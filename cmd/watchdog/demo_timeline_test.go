package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// The story the README tells, checked end to end: the demo (its simulated
// fleet, the real daemon, the real dispatcher and routes) runs in a
// testing/synctest bubble over an in-memory network, so the whole scenario
// passes in virtual time. Recording integrations take the place of the
// demo's Slack and PagerDuty printers. For every incident the scenario
// scripts, on-call must get exactly one page of the severity it pages as
// (pagedAs), whose headline names the scripted cause, that resolves after
// the incident's recovery and not before; no other critical page may fire,
// and nothing on an affected replica may be resolved while its incident is
// still running.
func TestDemoTimeline(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		run := runDemoInBubble(t)
		t.Logf("page timeline (t = scenario time):\n%s", run.timeline())
		if len(run.events) == 0 {
			t.Fatal("no integration received anything: the harness is broken")
		}
		for _, v := range checkDemoTimeline(run) {
			if demoStoryEnforced {
				t.Error(v)
			} else {
				t.Log("not yet enforced (issue 8): " + v)
			}
		}
	})
}

// demoStoryEnforced makes a departure from the story fail the test;
// TestDemoTimelineCheck proves the checks catch each departure.
const demoStoryEnforced = true

// keepSignalMachineryOutOfBubble subscribes to SIGHUP for the whole test.
// The daemon subscribes too (reloads); the first subscription of a process
// starts the runtime's signal goroutine and its channels, which must not be
// born inside a bubble (a goroutine outside it would then select on them),
// and a signal already subscribed to makes the daemon's subscription touch
// none of them.
func keepSignalMachineryOutOfBubble(t *testing.T) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	t.Cleanup(func() { signal.Stop(hup) })
}

// resolveWithin bounds how long after its replica drained an incident's
// page may stay open: the demo's detectors look 20 s back and its alerts
// keep firing 15 s after their condition clears, so a page still open a
// minute after the queue emptied tells on-call that an incident is burning
// when it is over.
const resolveWithin = time.Minute

// settle is how long the demo runs past the last moment a resolve may come,
// so a page that fires during the last drain is seen too.
const settle = 15 * time.Second

// demoRun is what one run of the demo sent.
type demoRun struct {
	start     time.Time
	scenario  sim.Scenario
	incidents []scriptedIncident
	end       time.Duration // scenario time at which the demo was stopped
	events    []recorded
	logs      string // the daemon's log (warnings and errors)
}

// runDemoInBubble runs the demo until settle after the last moment a page
// may resolve and returns what reached the recording integrations. It must
// be called inside a synctest bubble. launch, when given, starts the demo
// instead of demo() (watchdog record --demo).
func runDemoInBubble(t *testing.T, launch ...func(ctx context.Context, dio daemonIO) error) demoRun {
	t.Helper()
	network := memnet.New()
	rec := &recorder{}
	var stdout, stderr lockedBuffer

	// The demo reads the clock before anything in the bubble blocks, so
	// its scenario starts exactly now.
	start := time.Now()
	fleet := demoFleet(start)
	run := demoRun{start: start, scenario: fleet.Scenario}
	run.incidents = scriptedIncidents(fleet)
	if len(run.incidents) == 0 {
		t.Fatal("the demo scenario scripts no incident")
	}
	if err := measureDrains(fleet, run.incidents); err != nil {
		t.Fatal(err)
	}
	for _, inc := range run.incidents {
		run.end = max(run.end, inc.end, inc.drained+resolveWithin+settle)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	launchDemo := func(ctx context.Context, dio daemonIO) error { return demo(ctx, map[string]string{}, dio) }
	if len(launch) > 0 {
		launchDemo = launch[0]
	}
	go func() {
		done <- launchDemo(ctx, daemonIO{
			stdout: &stdout, stderr: &stderr,
			dial: network.DialContext, listen: network.Listen,
			extraIntegrations: []notify.Integration{
				{Name: notify.IntegrationPagerDuty, Notifier: rec.as(notify.IntegrationPagerDuty)},
				{Name: notify.IntegrationSlack, Notifier: rec.as(notify.IntegrationSlack)},
			},
		})
	}()
	time.Sleep(run.end)
	cancel()
	err := <-done
	network.Close()
	run.events = rec.all()
	// Each integration's queue delivers on its own: order by production.
	slices.SortStableFunc(run.events, func(a, b recorded) int { return a.ev.At.Compare(b.ev.At) })
	run.logs = stderr.String()
	if err != nil {
		t.Fatalf("demo: %v\nlog:\n%s", err, run.logs)
	}
	if !strings.Contains(stdout.String(), "demo stopped.") {
		t.Errorf("the demo did not stop cleanly; its output:\n%s", stdout.String())
	}
	return run
}

// scriptedIncident is one incident of the scenario: consecutive phases of
// one class on the same replicas (the retry avalanche's burst and its
// sustained loop are one incident).
type scriptedIncident struct {
	class     string   // sim class
	replicas  []string // replica names
	start     time.Duration
	end       time.Duration // when its last phase ends
	recovered time.Duration // from here on a resolve is true
	// drained is when, after the recovery, every replica of the incident
	// has an empty queue again: the users' harm is over, and the page must
	// resolve soon after.
	drained time.Duration
	// next is when the following incident starts (or the run ends): a page
	// that starts in [start, next) on one of replicas belongs to this one.
	next time.Duration
}

func (s scriptedIncident) String() string {
	return fmt.Sprintf("%s on %s at %s–%s", s.class, strings.Join(s.replicas, ","), clock(s.start), clock(s.end))
}

func (s scriptedIncident) on(replica string) bool { return slices.Contains(s.replicas, replica) }

// scriptedIncidents reads the incidents from the demo fleet's scenario.
func scriptedIncidents(cfg sim.FleetConfig) []scriptedIncident {
	names := sim.NewFleet(sim.FleetConfig{Replicas: cfg.Replicas, Scenario: cfg.Scenario}).Replicas()
	var out []scriptedIncident
	var at time.Duration
	for i, p := range cfg.Scenario.Phases {
		begin := at
		at += p.Duration
		if p.Class == "" {
			continue
		}
		var replicas []string
		for r, name := range names {
			if p.Replicas == nil || slices.Contains(p.Replicas, r) {
				replicas = append(replicas, name)
			}
		}
		if n := len(out); n > 0 && out[n-1].class == p.Class && out[n-1].end == begin && slices.Equal(out[n-1].replicas, replicas) {
			out[n-1].end, out[n-1].recovered = at, at
			continue
		}
		inc := scriptedIncident{class: p.Class, replicas: replicas, start: begin, end: at, recovered: at}
		if p.Crash > 0 {
			// The incident is over when the process serves again, which
			// may be before the phase ends.
			inc.recovered = begin + p.Crash
		}
		if i == len(cfg.Scenario.Phases)-1 {
			panic("the demo scenario ends in an incident that never recovers")
		}
		out = append(out, inc)
	}
	for i := range out {
		if i+1 < len(out) {
			out[i].next = out[i+1].start
		} else {
			out[i].next = 1<<63 - 1
		}
	}
	return out
}

// measureDrains sets each incident's drained time from a twin of the
// demo's fleet: the simulation depends only on its seed, its scenario and
// the instants it is advanced to, so the twin carries the same load as the
// fleet the daemon watches.
func measureDrains(cfg sim.FleetConfig, incidents []scriptedIncident) error {
	twin := sim.NewFleet(cfg)
	index := map[string]int{}
	for i, name := range twin.Replicas() {
		index[name] = i
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	queued := func(i int) (float64, error) {
		var b bytes.Buffer
		if err := twin.WriteMetrics(&b, i); err != nil {
			return math.Inf(1), nil // down: nobody is served
		}
		families, err := parser.TextToMetricFamilies(&b)
		if err != nil {
			return 0, fmt.Errorf("twin fleet exposition: %w", err)
		}
		f := families["sglang:num_queue_reqs"]
		if f == nil {
			return 0, errors.New("twin fleet exposition has no sglang:num_queue_reqs")
		}
		var q float64
		for _, m := range f.GetMetric() {
			q = max(q, m.GetGauge().GetValue())
		}
		return q, nil
	}
	const horizon = 10 * time.Minute
	for k := range incidents {
		inc := &incidents[k]
		inc.drained = -1
		for at := inc.recovered; at <= inc.recovered+horizon && inc.drained < 0; at += time.Second {
			twin.Advance(cfg.Start.Add(at))
			empty := true
			for _, name := range inc.replicas {
				q, err := queued(index[name])
				if err != nil {
					return err
				}
				empty = empty && q == 0
			}
			if empty {
				inc.drained = at
			}
		}
		if inc.drained < 0 {
			return fmt.Errorf("%s: the twin fleet did not drain within %s of the recovery", inc, horizon)
		}
	}
	return nil
}

// causeInHeadline tells, per scripted class, whether a headline names the
// cause the scenario scripted (not one of its consequences).
var causeInHeadline = map[string]*regexp.Regexp{
	sim.ClassPreemptStorm:   regexp.MustCompile(`(?i)preempt|retract`),
	sim.ClassCacheCollapse:  regexp.MustCompile(`(?i)prefix|cache hit|hit rate`),
	sim.ClassRetryAvalanche: regexp.MustCompile(`(?i)retr(y|ies|ied)`),
	sim.ClassCrash:          regexp.MustCompile(`(?i)down|unreachable|crash|restart|not serving|refus`),
	sim.ClassGPUThermal:     regexp.MustCompile(`(?i)GPU throttled.*thermal`),
}

// pagedAs is the severity a scripted incident pages with: critical, but
// for the prefix-cache collapse. The demo's replica is fast, and its TTFT
// p99 multiplies to a fraction of a second (under critical_min_ttft),
// which users do not feel: a warning, to Slack.
func pagedAs(class string) detect.Severity {
	if class == sim.ClassCacheCollapse {
		return detect.Warning
	}
	return detect.Critical
}

// episode is one page: an incident key from its trigger to its resolve.
type episode struct {
	fingerprint string
	replica     string
	events      []recorded      // to PagerDuty or Slack, in order
	severity    detect.Severity // the highest it fired with
	pagedAt     time.Time       // its first event of that severity; zero: it never fired
	resolvedAt  time.Time       // zero: still open when the demo stopped
}

// lastFiring is the newest event before the resolve: what the page says
// while the incident runs.
func (e episode) lastFiring() recorded {
	var out recorded
	for _, r := range e.events {
		if r.ev.Kind != notify.KindResolve {
			out = r
		}
	}
	return out
}

// episodes groups the recorded events into pages. An event to several
// integrations counts once; a trigger after a resolve starts a new page.
func (run demoRun) episodes() []episode {
	var out []episode
	open := map[string]int{}    // fingerprint -> index in out of its open page
	byEvent := map[string]int{} // fingerprint/seq -> index in out
	for _, r := range run.events {
		key := fmt.Sprintf("%s/%d", r.ev.Fingerprint, r.ev.Seq)
		i, seen := byEvent[key]
		if !seen {
			var ok bool
			if i, ok = open[r.ev.Fingerprint]; !ok {
				out = append(out, episode{fingerprint: r.ev.Fingerprint, replica: r.ev.Replica})
				i = len(out) - 1
				open[r.ev.Fingerprint] = i
			}
			byEvent[key] = i
			out[i].events = append(out[i].events, r)
			if r.ev.Kind == notify.KindResolve {
				out[i].resolvedAt = r.ev.At
				delete(open, r.ev.Fingerprint)
			}
		}
		e := &out[i]
		if r.ev.Kind != notify.KindResolve && (e.pagedAt.IsZero() || r.ev.Severity > e.severity) {
			e.severity, e.pagedAt = r.ev.Severity, r.ev.At
		}
	}
	return out
}

// checkDemoTimeline checks the story: one page per scripted incident, of
// the severity it pages as, naming its cause, resolved after its recovery
// and not before. It returns every way the run departs from it.
func checkDemoTimeline(run demoRun) []string {
	var out []string
	fail := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	pages := map[int][]episode{} // scripted incident -> its pages of the severity it pages as
	for _, e := range run.episodes() {
		if e.pagedAt.IsZero() {
			continue
		}
		at := e.pagedAt.Sub(run.start)
		owner := -1
		for i, inc := range run.incidents {
			if inc.on(e.replica) && at >= inc.start && at < inc.next {
				owner = i
			}
		}
		switch {
		case owner >= 0 && e.severity == pagedAs(run.incidents[owner].class):
			pages[owner] = append(pages[owner], e)
		case e.severity < detect.Critical:
			// A warning beside an incident paged critical is not a page
			// that wakes anyone.
		case owner < 0:
			fail("critical page at %s on %s belongs to no scripted incident (%s): %s", clock(at), e.replica,
				run.lastIncidentOn(e.replica, at), e.lastFiring().line(run.start))
		default:
			fail("%s: a critical page, want it paged as a %s: %s", run.incidents[owner], pagedAs(run.incidents[owner].class),
				e.lastFiring().line(run.start))
		}
	}
	for i, inc := range run.incidents {
		got := pages[i]
		if len(got) != 1 {
			var lines []string
			for _, e := range got {
				lines = append(lines, "\n    "+e.lastFiring().line(run.start))
			}
			fail("%s: %d %s pages, want exactly 1%s", inc, len(got), pagedAs(inc.class), strings.Join(lines, ""))
		}
		if len(got) == 0 {
			continue
		}
		// The page to judge further: the one naming the cause, if any.
		page := got[0]
		for _, e := range got {
			if causeInHeadline[inc.class].MatchString(e.lastFiring().ev.Headline) {
				page = e
				break
			}
		}
		if h := page.lastFiring().ev.Headline; !causeInHeadline[inc.class].MatchString(h) {
			fail("%s: headline %q does not name the cause (want %s)", inc, h, causeInHeadline[inc.class])
		}
		switch resolved := page.resolvedAt.Sub(run.start); {
		case page.resolvedAt.IsZero():
			fail("%s: its page was still open when the run ended at %s, %s after its replica drained at %s (want resolved within %s)",
				inc, clock(run.end), run.end-inc.drained, clock(inc.drained), resolveWithin)
		case resolved < inc.recovered:
			fail("%s: its page resolved at %s, before the recovery at %s", inc, clock(resolved), clock(inc.recovered))
		case resolved > inc.drained+resolveWithin:
			fail("%s: its page resolved at %s, %s after its replica drained at %s (want within %s)", inc, clock(resolved),
				resolved-inc.drained, clock(inc.drained), resolveWithin)
		}
	}
	// A resolve while the replica's incident still runs tells on-call it
	// is over when it is not, whatever page it closes.
	resolves := map[string]bool{}
	for _, r := range run.events {
		key := fmt.Sprintf("%s/%d", r.ev.Fingerprint, r.ev.Seq)
		if r.ev.Kind != notify.KindResolve || resolves[key] {
			continue
		}
		resolves[key] = true // once, whichever integrations it reached
		at := r.ev.At.Sub(run.start)
		for _, inc := range run.incidents {
			if inc.on(r.ev.Replica) && at >= inc.start && at < inc.recovered {
				fail("RESOLVED during %s: %s", inc, r.line(run.start))
			}
		}
	}
	return out
}

// lastIncidentOn describes the newest scripted incident of replica that
// started before at.
func (run demoRun) lastIncidentOn(replica string, at time.Duration) string {
	out := "no incident was scripted on " + replica + " before"
	for _, inc := range run.incidents {
		if inc.on(replica) && inc.start <= at {
			out = fmt.Sprintf("the last one on %s, %s, recovered at %s", replica, inc, clock(inc.recovered))
		}
	}
	return out
}

// timeline renders the scenario's phases and every event the integrations
// received, in scenario time.
func (run demoRun) timeline() string {
	type row struct {
		at   time.Duration
		text string
	}
	var rows []row
	var at time.Duration
	for _, p := range run.scenario.Phases {
		if at <= run.end {
			rows = append(rows, row{at, fmt.Sprintf("t+%s ── phase %s", clock(at), p.Name)})
		}
		at += p.Duration
	}
	for _, inc := range run.incidents {
		rows = append(rows, row{inc.drained, fmt.Sprintf("t+%s ── %s drained (queue empty) after %s", clock(inc.drained), strings.Join(inc.replicas, ","), inc.class)})
	}
	byKey := map[string]int{}
	to := map[int][]string{} // row -> the integrations its event reached
	for _, r := range run.events {
		key := fmt.Sprintf("%s/%d", r.ev.Fingerprint, r.ev.Seq)
		i, ok := byKey[key]
		if !ok {
			i = len(rows)
			byKey[key] = i
			rows = append(rows, row{r.ev.At.Sub(run.start), r.line(run.start)})
		}
		to[i] = append(to[i], r.integration)
	}
	for i, names := range to {
		slices.Sort(names)
		rows[i].text += " → " + strings.Join(names, ",")
	}
	slices.SortStableFunc(rows, func(a, b row) int { return int(a.at - b.at) })
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// recorded is one event as one integration received it.
type recorded struct {
	integration string
	ev          notify.Event
}

func (r recorded) line(start time.Time) string {
	headline := r.ev.Headline
	if headline == "" {
		headline = "(no headline) " + r.ev.Summary
	}
	return fmt.Sprintf("t+%s %-7s %-8s %-16s %-6s %q (key %s)", clock(r.ev.At.Sub(start)), r.ev.Kind, r.ev.Severity,
		r.ev.Class, r.ev.Replica, headline, r.ev.Fingerprint)
}

// recorder stands in for an integration and keeps what it was sent.
type recorder struct {
	mu     sync.Mutex
	events []recorded
}

func (r *recorder) as(integration string) notify.Notifier {
	return notifierFunc(func(_ context.Context, ev notify.Event) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.events = append(r.events, recorded{integration: integration, ev: ev})
		return nil
	})
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

type notifierFunc func(context.Context, notify.Event) error

func (f notifierFunc) Notify(ctx context.Context, ev notify.Event) error { return f(ctx, ev) }

// clock renders a scenario offset as m:ss.
func clock(d time.Duration) string {
	d = d.Truncate(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

// lockedBuffer is a bytes.Buffer the demo's goroutines may share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The checks of TestDemoTimeline catch each way a timeline can depart from
// the story, and accept what the story allows (a consequence paged first
// and re-titled in place when its cause appears).
func TestDemoTimelineCheck(t *testing.T) {
	start := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	incidents := scriptedIncidents(demoFleet(start))
	if len(incidents) != 5 {
		t.Fatalf("the demo scripts %d incidents (%v); this test builds timelines for its 5", len(incidents), incidents)
	}
	// Drains as the demo's fleet has them, give or take: the storm's
	// backlog takes minutes, the others' seconds.
	for i, d := range []time.Duration{100 * time.Second, 0, 20 * time.Second, 0, 40 * time.Second} {
		incidents[i].drained = incidents[i].recovered + d
	}
	storm, collapse, avalanche, crash := incidents[0], incidents[1], incidents[2], incidents[3]
	for i, want := range []string{sim.ClassPreemptStorm, sim.ClassCacheCollapse, sim.ClassRetryAvalanche, sim.ClassCrash, sim.ClassGPUThermal} {
		if incidents[i].class != want {
			t.Fatalf("incident %d is %s, want %s", i, incidents[i], want)
		}
	}
	headlines := map[string]string{
		sim.ClassPreemptStorm:   "requests being preempted 0.6/s, KV cache full; queue 294, p99 TTFT 8.1 s",
		sim.ClassCacheCollapse:  "prefix cache hit rate 18% (was 82%): prompts stopped sharing a prefix",
		sim.ClassRetryAvalanche: "client retries amplify load 1.6x; queue 52, aborted 2.2/s",
		sim.ClassCrash:          "replica down: connection refused",
		sim.ClassGPUThermal:     "GPU throttled: HW thermal slowdown (0x40) on GPU 0 on node sim-node-1",
	}
	seq := map[string]uint64{}
	event := func(kind notify.Kind, severity detect.Severity, class string, inc scriptedIncident, key string, at time.Duration, headline string) []recorded {
		seq[key]++
		ev := notify.Event{Kind: kind, Severity: severity, Class: class, Replica: inc.replicas[0], Fingerprint: key,
			Seq: seq[key], At: start.Add(at), Headline: inc.replicas[0] + ": " + headline}
		out := []recorded{{integration: notify.IntegrationSlack, ev: ev}}
		if severity == detect.Critical {
			out = append(out, recorded{integration: notify.IntegrationPagerDuty, ev: ev})
		}
		return out
	}
	pageAs := func(inc scriptedIncident, key, class, headline string, firing, resolved time.Duration) []recorded {
		sev := pagedAs(inc.class)
		return append(event(notify.KindTrigger, sev, class, inc, key, firing, headline),
			event(notify.KindResolve, sev, class, inc, key, resolved, headline)...)
	}
	page := func(inc scriptedIncident, key string, firing, resolved time.Duration) []recorded {
		class := map[string]string{sim.ClassCrash: "replica_down", sim.ClassGPUThermal: "gpu_throttled"}[inc.class]
		if class == "" {
			class = inc.class
		}
		return pageAs(inc, key, class, headlines[inc.class], firing, resolved)
	}
	story := func() []recorded {
		clear(seq)
		var out []recorded
		for i, inc := range incidents {
			out = append(out, page(inc, fmt.Sprint("cause-", i), inc.start+20*time.Second, inc.recovered+20*time.Second)...)
		}
		return out
	}
	healthy := scriptedIncident{replicas: []string{"sim-1"}}

	for _, tc := range []struct {
		name  string
		extra func() []recorded
		edit  func([]recorded) []recorded
		want  []string // substrings of the departures, in any order; none: the story holds
	}{
		{name: "the story"},
		{
			name: "a consequence re-titled in place when its cause appears",
			edit: func(rs []recorded) []recorded {
				// The storm's page starts as queue_latency 10 s earlier.
				first := event(notify.KindTrigger, detect.Critical, "queue_latency", storm, "cause-0", storm.start+10*time.Second, "TTFT p99 5.9 s")
				for i := range first {
					first[i].ev.Seq = 1
				}
				for i := range rs {
					if rs[i].ev.Fingerprint == "cause-0" {
						rs[i].ev.Seq++
						if rs[i].ev.Kind == notify.KindTrigger {
							rs[i].ev.Kind = notify.KindUpdate
						}
					}
				}
				return append(first, rs...)
			},
		},
		{
			name: "a consequence paged beside its cause, then resolved during the storm",
			extra: func() []recorded {
				return pageAs(storm, "consequence", "queue_latency", "TTFT p99 5.9 s", storm.start+10*time.Second, storm.start+40*time.Second)
			},
			want: []string{"preempt_storm on sim-0 at 0:45–1:45: 2 critical pages", "RESOLVED during preempt_storm on sim-0"},
		},
		{
			name: "a warning escalated to critical is a critical page",
			extra: func() []recorded {
				return append(event(notify.KindTrigger, detect.Warning, "decode_slowdown", avalanche, "slow", avalanche.start+5*time.Second, "decode slow"),
					event(notify.KindUpdate, detect.Critical, "decode_slowdown", avalanche, "slow", avalanche.start+15*time.Second, "decode slow")...)
			},
			want: []string{"retry_avalanche on sim-2 at 3:30–4:20: 2 critical pages"},
		},
		{
			name: "a warning is not a critical page",
			extra: func() []recorded {
				return event(notify.KindTrigger, detect.Warning, "kv_saturation", storm, "kv", storm.start+5*time.Second, "KV 95%")
			},
		},
		{
			name: "the cause paged again during the drain",
			extra: func() []recorded {
				return event(notify.KindTrigger, detect.Critical, "preempt_storm", storm, "cause-0", storm.recovered+25*time.Second, "preempted again")
			},
			want: []string{"preempt_storm on sim-0 at 0:45–1:45: 2 critical pages"},
		},
		{
			name:  "a critical page on a healthy replica",
			extra: func() []recorded { return page(healthy, "false", storm.start+30*time.Second, storm.end) },
			want:  []string{"critical page at 1:15 on sim-1 belongs to no scripted incident"},
		},
		{
			name: "a drain consequence after the recovery",
			extra: func() []recorded {
				return page(avalanche, "drain", avalanche.recovered+47*time.Second, avalanche.recovered+90*time.Second)
			},
			want: []string{"critical page at 5:07 on sim-2 belongs to no scripted incident (the last one on sim-2, retry_avalanche"},
		},
		{
			name: "resolved before the recovery",
			edit: func(rs []recorded) []recorded {
				return retime(rs, "cause-1", notify.KindResolve, start.Add(collapse.recovered-5*time.Second))
			},
			want: []string{"cache_collapse on sim-1 at 2:15–3:00: its page resolved at 2:55, before the recovery at 3:00", "RESOLVED during cache_collapse"},
		},
		{
			name: "resolved long after the recovery",
			edit: func(rs []recorded) []recorded {
				return retime(rs, "cause-3", notify.KindResolve, start.Add(crash.recovered+100*time.Second))
			},
			want: []string{"crash on sim-0 at 4:50–5:20: its page resolved at 6:55, 1m40s after its replica drained at 5:15"},
		},
		{
			name: "never resolved",
			edit: func(rs []recorded) []recorded {
				return slices.DeleteFunc(rs, func(r recorded) bool { return r.ev.Fingerprint == "cause-2" && r.ev.Kind == notify.KindResolve })
			},
			want: []string{"retry_avalanche on sim-2 at 3:30–4:20: its page was still open when the run ended at 8:45, 4m5s after its replica drained at 4:40"},
		},
		{
			name: "a headline that names a consequence, not the cause",
			edit: func(rs []recorded) []recorded {
				for i := range rs {
					if rs[i].ev.Fingerprint == "cause-2" {
						rs[i].ev.Headline = "sim-2: TTFT p99 5.86s (baseline 0.099s); queue 52"
					}
				}
				return rs
			},
			want: []string{"retry_avalanche on sim-2 at 3:30–4:20: headline \"sim-2: TTFT p99 5.86s (baseline 0.099s); queue 52\" does not name the cause"},
		},
		{
			name: "a cause paged only as a warning",
			edit: func(rs []recorded) []recorded {
				out := rs[:0]
				for _, r := range rs {
					if r.ev.Fingerprint == "cause-2" {
						if r.integration == notify.IntegrationPagerDuty {
							continue
						}
						r.ev.Severity = detect.Warning
					}
					out = append(out, r)
				}
				return out
			},
			want: []string{"retry_avalanche on sim-2 at 3:30–4:20: 0 critical pages, want exactly 1"},
		},
		{
			name: "a cause paged critical that users do not feel",
			edit: func(rs []recorded) []recorded {
				for i := range rs {
					if rs[i].ev.Fingerprint == "cause-1" {
						rs[i].ev.Severity = detect.Critical
					}
				}
				return rs
			},
			want: []string{"cache_collapse on sim-1 at 2:15–3:00: a critical page, want it paged as a warning",
				"cache_collapse on sim-1 at 2:15–3:00: 0 warning pages, want exactly 1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events := story()
			if tc.edit != nil {
				events = tc.edit(events)
			}
			if tc.extra != nil {
				events = append(events, tc.extra()...)
			}
			slices.SortStableFunc(events, func(a, b recorded) int { return a.ev.At.Compare(b.ev.At) })
			run := demoRun{start: start, scenario: demoFleet(start).Scenario, incidents: incidents, events: events}
			for _, inc := range incidents {
				run.end = max(run.end, inc.drained+resolveWithin+settle)
			}
			got := checkDemoTimeline(run)
			if len(got) != len(tc.want) {
				t.Errorf("%d departures, want %d:\n%s\ntimeline:\n%s", len(got), len(tc.want), strings.Join(got, "\n"), run.timeline())
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
					t.Errorf("no departure says %q; got:\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// retime moves the events of kind of one fingerprint to at.
func retime(rs []recorded, key string, kind notify.Kind, at time.Time) []recorded {
	for i := range rs {
		if rs[i].ev.Fingerprint == key && rs[i].ev.Kind == kind {
			rs[i].ev.At = at
		}
	}
	return rs
}
