package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// Issue 30's acceptance: pages that stay true for the whole incident,
// checked through the real path. A simulated SGLang fleet (internal/sim:
// a scheduler model whose incidents emerge from the load, with clients
// that time out and retry) is scraped by the real daemon in a
// testing/synctest bubble; the real Slack and PagerDuty integrations page
// into notifytest's fakes over the bubble's network, and a recorder
// routed every event beside them keeps what the pages were made of.

// truthConfig goes over the demo's settings (configs/demo.yaml: 1 s
// rounds, detectors over 20-30 s against 1-minute baselines, alerts' for
// 5 s) and compresses decode_slowdown alike. The routes send PagerDuty and
// Slack exactly what the default routes send them (routedAsDefault checks
// it) and every event to the recorder.
const truthConfig = `
detectors:
  decode_slowdown: {range: 20s, baseline: 1m}
notify:
  routes:
    - {severities: [critical], integrations: [pagerduty, slack, record]}
    - {severities: [warning], integrations: [slack, record]}
    - {severities: [info], integrations: [record]}
`

// recordIntegration is the recorder's name beside Slack and PagerDuty.
const recordIntegration = "record"

// simRun is the real daemon watching a simulated fleet.
type simRun struct {
	*daemonRun
	fleet sim.FleetConfig // its Start is the scenario's time zero
	slack *notifytest.SlackServer
	pd    *notifytest.PagerDutyServer
}

// integrationFakes starts notifytest's Slack and PagerDuty. They must be
// started outside the bubble (their own listeners are real sockets); the
// daemon reaches their handlers over the bubble's network.
func integrationFakes(t *testing.T) (*notifytest.SlackServer, *notifytest.PagerDutyServer) {
	slackSrv, pd := notifytest.NewSlackServer(), notifytest.NewPagerDutyServer()
	t.Cleanup(slackSrv.Close)
	t.Cleanup(pd.Close)
	return slackSrv, pd
}

// startSimDaemon runs the simulated fleet fc from now, and the daemon on
// it with truthConfig and then overrides over the demo's settings, paging
// into slackSrv and pd. It must be called inside a synctest bubble.
func startSimDaemon(t *testing.T, overrides string, fc sim.FleetConfig, slackSrv *notifytest.SlackServer, pd *notifytest.PagerDutyServer) *simRun {
	t.Helper()
	cfg, err := demoConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, y := range []string{truthConfig, overrides} {
		if cfg, err = config.Parse(cfg, []byte(y)); err != nil {
			t.Fatalf("test configuration: %v", err)
		}
	}
	routedAsDefault(t, cfg.Notify.Routes)
	fc.Start = time.Now()
	fc.GPU.NoPodLabels = true // as the demo's: static targets, no pods
	fleet := sim.NewFleet(fc)
	ctx, stopFleet := context.WithCancel(context.Background())
	driven := make(chan struct{})
	go func() { driveFleet(ctx, fleet, io.Discard); close(driven) }()
	setup := func(network *memnet.Network, c *config.Config) {
		serve := func(h http.Handler) string {
			ln, err := network.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			return "http://" + ln.Addr().String()
		}
		*c = cfg
		if err := serveFleet(fleet, func(h http.Handler) (string, error) { return serve(h), nil }, c); err != nil {
			t.Fatal(err)
		}
		c.Notify.Slack.BotToken, c.Notify.Slack.Channel = secretToken, "#oncall"
		c.Notify.Slack.APIURL = serve(slackSrv.Config.Handler) + "/api"
		c.Notify.PagerDuty.RoutingKey = secretKey
		c.Notify.PagerDuty.EventsURL = serve(pd.Config.Handler) + "/v2/enqueue"
	}
	run := startDaemonRecording(t, "", nil, setup, recordIntegration)
	stopDaemon := run.stop
	run.stop = func() error {
		err := stopDaemon()
		stopFleet()
		<-driven
		return err
	}
	return &simRun{daemonRun: run, fleet: fc, slack: slackSrv, pd: pd}
}

// routedAsDefault fails unless routes, without the recorder, are the
// default routes: what PagerDuty and Slack receive is what they would
// receive in production.
func routedAsDefault(t *testing.T, routes []notify.Route) {
	t.Helper()
	want := notify.DefaultRoutes().Routes
	if len(routes) != len(want) {
		t.Fatalf("test routes %v, want the default routes %v plus the recorder", routes, want)
	}
	for i, r := range routes {
		got := slices.DeleteFunc(slices.Clone(r.Integrations), func(n string) bool { return n == recordIntegration })
		if !slices.Equal(r.Severities, want[i].Severities) || !slices.Equal(got, want[i].Integrations) {
			t.Fatalf("test route %d %+v, want the default %+v plus the recorder", i, r, want[i])
		}
	}
}

// at is the scenario time of an instant.
func (r *simRun) at(tm time.Time) time.Duration { return tm.Sub(r.fleet.Start) }

// sleepUntil sleeps until scenario time d.
func (r *simRun) sleepUntil(d time.Duration) { time.Sleep(time.Until(r.fleet.Start.Add(d))) }

// runUntil lets the run go on until scenario time end and stops it; the
// timeline is logged when the test fails (or with -v).
func (r *simRun) runUntil(t *testing.T, end time.Duration) {
	t.Helper()
	r.sleepUntil(end)
	if err := r.stop(); err != nil {
		t.Fatalf("daemon: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			r.logTimeline(t)
		}
	})
}

// paged are the events that paged someone (warning or critical), in the
// order they were made.
func (r *simRun) paged() []notify.Event {
	return slices.DeleteFunc(r.events(), func(ev notify.Event) bool { return ev.Severity < detect.Warning })
}

// phaseStart is when the scenario's phase called name begins.
func phaseStart(t *testing.T, sc sim.Scenario, name string) time.Duration {
	t.Helper()
	d, ok := sc.Start(name)
	if !ok {
		t.Fatalf("scenario %s has no phase %q", sc.Name, name)
	}
	return d
}

// drainedAfter is when, from recovered on, replica's queue is first empty
// in a twin of the run's fleet (the simulation depends only on its seed,
// its scenario and the instants it is advanced to).
func (r *simRun) drainedAfter(t *testing.T, replica string, recovered time.Duration) time.Duration {
	t.Helper()
	inc := []scriptedIncident{{class: "drain", replicas: []string{replica}, recovered: recovered}}
	if err := measureDrains(r.fleet, inc); err != nil {
		t.Fatal(err)
	}
	return inc[0].drained
}

// pageLine renders an event for a failure message, in scenario time.
func (r *simRun) pageLine(ev notify.Event) string {
	return fmt.Sprintf("t+%s %s %s %s seq %d %q", clock(r.at(ev.At)), ev.Kind, ev.Severity, ev.Replica, ev.Seq, ev.Headline)
}

// logTimeline logs the scenario's phases and every event, in scenario
// time, with what PagerDuty and Slack received.
func (r *simRun) logTimeline(t *testing.T) {
	t.Helper()
	var b strings.Builder
	var at time.Duration
	for _, p := range r.fleet.Scenario.Phases {
		fmt.Fprintf(&b, "t+%s ── phase %s\n", clock(at), p.Name)
		at += p.Duration
	}
	for _, ev := range r.events() {
		fmt.Fprintf(&b, "%s key %s\n", r.pageLine(ev), ev.Fingerprint)
		if len(ev.Emergency) > 0 {
			fmt.Fprintf(&b, "      first step: %s\n", ev.Emergency[0])
		}
		if ev.Failing != "" {
			fmt.Fprintf(&b, "      failing: %s\n", ev.Failing)
		}
	}
	for _, ev := range r.pd.Accepted() {
		fmt.Fprintf(&b, "PagerDuty: %s %s key %s %q\n", ev.Action, ev.Payload.Severity, ev.DedupKey, ev.Payload.Summary)
	}
	for _, m := range r.slack.Messages() {
		kind := "message"
		if m.ThreadTS != "" {
			kind = "thread reply to " + m.ThreadTS
		}
		fmt.Fprintf(&b, "Slack %s %s (edited %d times): %q\n", kind, m.TS, m.Updates, m.Text)
	}
	t.Logf("timeline (t = scenario time):\n%s\nlog:\n%s", b.String(), r.stderr.String())
}

// pagerDutyRequest is one event PagerDuty accepted, with when it arrived.
type pagerDutyRequest struct {
	at time.Duration // scenario time
	ev notifytest.PagerDutyEvent
}

// pagerDutyAccepted returns what PagerDuty accepted, in order.
func (r *simRun) pagerDutyAccepted(t *testing.T) []pagerDutyRequest {
	t.Helper()
	var out []pagerDutyRequest
	for _, req := range r.pd.Requests() {
		if req.Reply != http.StatusAccepted {
			continue
		}
		var ev notifytest.PagerDutyEvent
		if err := json.Unmarshal(req.Body, &ev); err != nil {
			t.Fatalf("PagerDuty request %s: %v", req.Body, err)
		}
		out = append(out, pagerDutyRequest{at: r.at(req.At), ev: ev})
	}
	return out
}

// finding reports whether the daemon's last round has a finding of class
// at severity on replica, as its API shows it.
func (r *simRun) finding(t *testing.T, replica string, class detect.Class, severity detect.Severity) bool {
	t.Helper()
	return slices.Contains(r.apiFindings(t)[replica], apiFinding{Class: string(class), Severity: severity.String()})
}

// failingMostSince is the first second in [from, to) from which replica
// of a twin of the run's fleet fails most of what it answers: over the
// 5 s before it, more requests aborted than completed, at least one a
// second. -1 when that never happens.
func (r *simRun) failingMostSince(t *testing.T, replica string, from, to time.Duration) time.Duration {
	t.Helper()
	twin := sim.NewFleet(r.fleet)
	i := slices.Index(twin.Replicas(), replica)
	const span = 5 * time.Second
	type counts struct{ aborted, completed float64 }
	read := func(at time.Duration) counts {
		twin.Advance(r.fleet.Start.Add(at))
		var b bytes.Buffer
		if err := twin.WriteMetrics(&b, i); err != nil {
			t.Fatalf("twin fleet %s at t+%s: %v", replica, clock(at), err)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(&b)
		if err != nil {
			t.Fatal(err)
		}
		sum := func(name string) float64 {
			v := 0.0
			for _, m := range fams[name].GetMetric() {
				v += m.GetCounter().GetValue()
			}
			return v
		}
		return counts{sum("sglang:num_aborted_requests_total"), sum("sglang:num_requests_total")}
	}
	var past []counts
	for at := from - span; at < to; at += time.Second {
		past = append(past, read(at))
		if len(past) <= int(span/time.Second) {
			continue
		}
		then, now := past[len(past)-1-int(span/time.Second)], past[len(past)-1]
		aborted, completed := now.aborted-then.aborted, now.completed-then.completed
		if aborted > completed && aborted >= span.Seconds() {
			return at
		}
	}
	return -1
}

// retryLoopStep tells an emergency step that stops a retry loop: shed at
// the router, or turn the clients' retries off or back them off.
var retryLoopStep = regexp.MustCompile(`(?i)(router|gateway).*(503|concurrency|shed)|retries.*(stop|back off|disable)|(stop|back off|disable).*retries`)

// TestGPUSlowdownRetryLoopPagesOneIncident: a GPU slowing 4x makes the
// clients of its replica time out and retry; the retries keep the queue
// full after the GPU recovers, until the clients stop retrying. On-call
// gets one incident (one dedup key, one critical trigger) whose headline
// names the decode slowdown and the retry avalanche, whose first
// emergency step stops the loop, that stays open while the loop runs
// after the GPU recovered, and resolves once after the load recovers.
func TestGPUSlowdownRetryLoopPagesOneIncident(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	slackSrv, pd := integrationFakes(t)
	synctest.Test(t, func(t *testing.T) {
		sc := sim.GPUSlowdownScenario(1)
		run := startSimDaemon(t, "", sim.FleetConfig{Seed: 1, Scenario: sc, Warmup: time.Minute}, slackSrv, pd)
		slow, loop, off := phaseStart(t, sc, "gpu_slowdown"), phaseStart(t, sc, "retry_loop"), phaseStart(t, sc, "retries_off")
		drained := run.drainedAfter(t, "sim-0", off)
		run.runUntil(t, drained+resolveWithin+settle)
		t.Logf("GPU slow at t+%s, recovered at t+%s; clients stop retrying at t+%s; sim-0's queue empty at t+%s",
			clock(slow), clock(loop), clock(off), clock(drained))

		paged := run.paged()
		if len(paged) == 0 {
			t.Fatal("nothing paged")
		}
		key := paged[0].Fingerprint
		var triggers, resolves []notify.Event
		sawBoth := false
		for _, ev := range paged {
			line := run.pageLine(ev)
			if ev.Fingerprint != key || ev.Replica != "sim-0" {
				t.Errorf("a second incident: %s (key %s; the first is %s)", line, ev.Fingerprint, key)
				continue
			}
			switch ev.Kind {
			case notify.KindTrigger:
				triggers = append(triggers, ev)
			case notify.KindResolve:
				resolves = append(resolves, ev)
				continue
			}
			names := regexp.MustCompile(`(?i)decode slowdown`).MatchString(ev.Headline) &&
				regexp.MustCompile(`(?i)retry avalanche`).MatchString(ev.Headline)
			if slices.Contains(ev.Explains, string(detect.RetryAvalanche)) || sawBoth {
				if !names {
					t.Errorf("the retry avalanche is part of the incident, but the headline does not name both it and the decode slowdown: %s", line)
				}
				if len(ev.Emergency) == 0 || !retryLoopStep.MatchString(ev.Emergency[0]) {
					first := "(none)"
					if len(ev.Emergency) > 0 {
						first = ev.Emergency[0]
					}
					t.Errorf("the first emergency step does not stop the retry loop: %q on %s", first, line)
				}
			}
			sawBoth = sawBoth || names
		}
		if !sawBoth {
			t.Error("no page names both the decode slowdown and the retry avalanche")
		}
		// One trigger: it may open as a warning and escalate as the
		// slowdown deepens (PagerDuty then gets it as critical, below).
		if len(triggers) != 1 {
			t.Errorf("%d triggers, want exactly 1", len(triggers))
		}
		if len(resolves) != 1 {
			t.Fatalf("%d resolves, want exactly 1", len(resolves))
		}
		switch at := run.at(resolves[0].At); {
		case at < off:
			t.Errorf("resolved at t+%s while the retry loop still ran (the clients stop retrying at t+%s): %s", clock(at), clock(off), run.pageLine(resolves[0]))
		case at > drained+resolveWithin:
			t.Errorf("resolved at t+%s, %s after sim-0's queue emptied at t+%s (want within %s)", clock(at), at-drained, clock(drained), resolveWithin)
		}
		// PagerDuty: one alert, that key, critical from its first event; the
		// updates that changed what the page says reach it as triggers on
		// the same key (the last one names the loop); one resolve last.
		var actions []string
		pdEvents := run.pd.Accepted()
		for _, ev := range pdEvents {
			actions = append(actions, ev.Action+"/"+ev.Payload.Severity+"/"+ev.DedupKey)
		}
		n := len(actions)
		if n < 2 || actions[n-1] != "resolve/critical/"+key || slices.ContainsFunc(actions[:n-1], func(a string) bool { return a != "trigger/critical/"+key }) {
			t.Errorf("PagerDuty accepted %v, want critical triggers of %s then one resolve", actions, key)
		} else if last := pdEvents[n-2].Payload.Summary; !strings.Contains(strings.ToLower(last), "retry avalanche") {
			t.Errorf("PagerDuty's last summary %q does not name the retry loop", last)
		}
		// Slack: one message, edited as the incident changed, whose thread
		// says when the loop joined.
		if parents := run.slack.Parents(); len(parents) != 1 {
			t.Errorf("%d Slack messages, want 1 for the one incident", len(parents))
		} else if !slices.ContainsFunc(run.slack.Replies(parents[0].TS), func(m notifytest.SlackMessage) bool {
			_, joined, ok := strings.Cut(m.Text, "Now also:* ")
			return ok && strings.Contains(strings.SplitN(joined, "\n", 2)[0], "retry_avalanche")
		}) {
			t.Error("no Slack thread reply says the retry avalanche joined")
		}
	})
}

// TestStormDrainFailuresUpdateThePageOnce: the demo's preemption storm
// (a batch job's wave of long documents fills sim-0's KV pool) leaves
// chats queued past their clients' 30 s timeout, so for a minute nearly
// every request fails while the backlog drains. On-call gets the storm's
// trigger, then exactly one update that shows the failures (the headline
// leads with them, Slack's thread reply says users are failing) and no
// second update for the same impact; one resolve once it has drained.
func TestStormDrainFailuresUpdateThePageOnce(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	slackSrv, pd := integrationFakes(t)
	synctest.Test(t, func(t *testing.T) {
		sc := demoStormScenario()
		run := startSimDaemon(t, "", sim.FleetConfig{Seed: 1, Scenario: sc, Warmup: time.Minute}, slackSrv, pd)
		start, recovery := phaseStart(t, sc, sim.ClassPreemptStorm), phaseStart(t, sc, "recovery")
		drained := run.drainedAfter(t, "sim-0", recovery)
		run.runUntil(t, drained+resolveWithin+settle)
		t.Logf("storm on sim-0 at t+%s–%s; its queue empty at t+%s", clock(start), clock(recovery), clock(drained))

		paged := run.paged()
		if len(paged) == 0 || paged[0].Kind != notify.KindTrigger {
			t.Fatalf("no trigger first; paged %d events", len(paged))
		}
		key := paged[0].Fingerprint
		var failures, afterFailures []notify.Event
		var resolves []notify.Event
		for _, ev := range paged {
			line := run.pageLine(ev)
			switch {
			case ev.Fingerprint != key || ev.Replica != "sim-0":
				t.Errorf("a second incident: %s (key %s; the storm's is %s)", line, ev.Fingerprint, key)
			case ev.Kind == notify.KindResolve:
				resolves = append(resolves, ev)
			case len(failures) > 0 && ev.Kind == notify.KindUpdate:
				afterFailures = append(afterFailures, ev)
			case ev.Failing != "":
				failures = append(failures, ev)
			}
		}
		if len(failures) != 1 || failures[0].Kind != notify.KindUpdate {
			t.Fatalf("%d pages first showing the failures, want exactly 1 update", len(failures))
		}
		upd := failures[0]
		failingLead, _, _ := strings.Cut(upd.Failing, " — ")
		if !regexp.MustCompile(`(?i)preempt`).MatchString(upd.Headline) || !strings.Contains(upd.Headline, failingLead) ||
			!slices.Contains(upd.Explains, string(detect.ErrorRate)) {
			t.Errorf("the update does not say that the storm now fails users: %s (explains %v)", run.pageLine(upd), upd.Explains)
		}
		for _, ev := range afterFailures {
			t.Errorf("a second update after the failures were paged: %s", run.pageLine(ev))
		}
		if len(resolves) != 1 {
			t.Fatalf("%d resolves, want exactly 1", len(resolves))
		}
		switch at := run.at(resolves[0].At); {
		case at < recovery:
			t.Errorf("resolved at t+%s, during the storm (until t+%s)", clock(at), clock(recovery))
		case at > drained+resolveWithin:
			t.Errorf("resolved at t+%s, %s after sim-0's queue emptied at t+%s (want within %s)", clock(at), at-drained, clock(drained), resolveWithin)
		}
		// Slack: the storm's one message, and one thread reply saying
		// users are failing.
		parents := run.slack.Parents()
		if len(parents) != 1 {
			t.Fatalf("%d Slack messages, want 1 for the one incident", len(parents))
		}
		var failing []string
		for _, m := range run.slack.Replies(parents[0].TS) {
			if strings.Contains(m.Text, "*Users failing:*") {
				failing = append(failing, m.Text)
			}
		}
		if len(failing) != 1 {
			t.Errorf("%d Slack thread replies say users are failing, want 1: %q", len(failing), failing)
		}
		if parents[0].Updates < 2 {
			t.Errorf("the Slack message was edited %d times, want the update and the resolve at least", parents[0].Updates)
		}
	})
}

// demoStormScenario is the demo's first phases, up to its preemption
// storm on sim-0, and then recovery for good.
func demoStormScenario() sim.Scenario {
	demo := sim.DemoScenario(1)
	storm := slices.IndexFunc(demo.Phases, func(p sim.Phase) bool { return p.Class == sim.ClassPreemptStorm })
	return sim.Scenario{Name: "demo_storm", Base: demo.Base,
		Phases: slices.Concat(demo.Phases[:storm+1], []sim.Phase{{Name: "recovery"}})}
}

// TestWarningStormOutagePagesPagerDutyWithinFor: the demo's preemption
// storm on a fleet of the September 2025 release, whose only retraction
// signal is the lossy gauge, so the storm can only be a warning; its
// chats time out behind the wave and the replica fails nearly every
// request (aborts, no completions). With the default routes the warning
// goes to Slack only; within alerts.for of the outage showing in the
// watchdog's round, PagerDuty gets a critical trigger of the same
// incident (the warning's dedup key).
func TestWarningStormOutagePagesPagerDutyWithinFor(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	slackSrv, pd := integrationFakes(t)
	synctest.Test(t, func(t *testing.T) {
		sc := demoStormScenario()
		run := startSimDaemon(t, "", sim.FleetConfig{Seed: 1, Scenario: sc, Warmup: time.Minute, Release: sim.ReleaseSep2025}, slackSrv, pd)
		cfg, err := demoConfig()
		if err != nil {
			t.Fatal(err)
		}
		forDur := cfg.Alerts.For
		start, recovery := phaseStart(t, sc, sim.ClassPreemptStorm), phaseStart(t, sc, "recovery")
		outage := run.failingMostSince(t, "sim-0", start, recovery+time.Minute)
		drained := run.drainedAfter(t, "sim-0", recovery)
		// Read each round's findings between rounds (they run on whole
		// seconds): when does the watchdog first see the outage?
		seen := time.Duration(-1)
		for at := start + 500*time.Millisecond; at < recovery+time.Minute && seen < 0; at += time.Second {
			run.sleepUntil(at)
			if run.finding(t, "sim-0", detect.ErrorRate, detect.Critical) {
				seen = at
			}
		}
		run.runUntil(t, drained+resolveWithin+settle)
		if outage < 0 || seen < 0 {
			t.Fatalf("no outage: the twin fleet fails most requests from %v, the watchdog sees error_rate critical from %v", outage, seen)
		}
		t.Logf("storm on sim-0 at t+%s–%s; sim-0 fails most requests from t+%s; the watchdog's round shows error_rate critical at t+%s",
			clock(start), clock(recovery), clock(outage), clock(seen))

		paged := run.paged()
		if len(paged) == 0 || paged[0].Kind != notify.KindTrigger {
			t.Fatal("no trigger first")
		}
		// The first page is a warning of the incident the storm is (its
		// slower decode may show a round before the storm and be renamed
		// after it, under the same key).
		first := paged[0]
		storm := slices.IndexFunc(paged, func(ev notify.Event) bool { return ev.Class == string(detect.PreemptStorm) })
		if storm < 0 || first.Severity != detect.Warning || first.Replica != "sim-0" || first.Fingerprint != paged[storm].Fingerprint {
			t.Fatalf("the first page is not a warning of the storm's incident: %s %s", first.Class, run.pageLine(first))
		}
		key := first.Fingerprint
		if parents := run.slack.Parents(); len(parents) != 1 {
			t.Errorf("Slack has %d messages, want the storm's one", len(parents))
		} else if posted := run.slack.Requests()[0]; posted.Method != "chat.postMessage" || !strings.HasPrefix(posted.Form.Get("text"), "[WARNING]") {
			t.Errorf("Slack's first request is %s %q, want the warning posted", posted.Method, posted.Form.Get("text"))
		}
		accepted := run.pagerDutyAccepted(t)
		var critical *pagerDutyRequest
		for i, req := range accepted {
			switch {
			case req.ev.Payload.Severity != detect.Critical.String():
				t.Errorf("PagerDuty got a %s event at t+%s: %q (the default routes send it critical only)", req.ev.Payload.Severity, clock(req.at), req.ev.Payload.Summary)
			case req.ev.DedupKey != key:
				t.Errorf("PagerDuty got another incident's event at t+%s (key %s, the storm's is %s): %q", clock(req.at), req.ev.DedupKey, key, req.ev.Payload.Summary)
			case critical == nil && req.ev.Action == "trigger":
				critical = &accepted[i]
			}
		}
		if critical == nil {
			t.Fatal("PagerDuty never got a critical trigger of the storm's incident")
		}
		t.Logf("warning to Slack at t+%s; PagerDuty critical at t+%s: %q", clock(run.at(first.At)), clock(critical.at), critical.ev.Payload.Summary)
		if run.at(first.At) >= critical.at {
			t.Errorf("the warning at t+%s did not come before PagerDuty's critical at t+%s", clock(run.at(first.At)), clock(critical.at))
		}
		if late := critical.at - seen; late > forDur {
			t.Errorf("PagerDuty's critical came %s after the watchdog's round showed the outage (at t+%s), want within alerts.for (%s)", late, clock(seen), forDur)
		}
		if late := critical.at - outage; late > detect.Get[detect.ErrorRateConfig](cfg.Detectors).Range+forDur {
			t.Errorf("PagerDuty's critical came %s after sim-0 began failing most requests (t+%s), want within error_rate's range and alerts.for", late, clock(outage))
		}
	})
}
