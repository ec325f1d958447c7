package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// sloDriftConfig watches with coarse intervals (the runs last an hour of
// bubble time) and a page rule scaled down from the workbook's 1h/5m
// (30m/5m), so the memory spans it half an hour in.
const sloDriftConfig = `
listen_address: "127.0.0.1:9402"
log_level: warn
scrape: {interval: 15s}
evaluation: {interval: 30s}
alerts: {for: 1m, keep_firing_for: 2m}
slos:
  policy:
    page: [{long: 30m, short: 5m, burn_rate: 14.4}]
    warning: []
  objectives:
    - {name: chat-ttft, model: org/model, kind: ttft, threshold: 400ms, objective: 0.99, period: 24h}
`

// sloPages are the trigger events, and every event's class by
// fingerprint.
func sloPages(evs []notify.Event) (triggers []notify.Event, classes map[string][]string) {
	classes = map[string][]string{}
	for _, ev := range evs {
		if ev.Kind == notify.KindTrigger {
			triggers = append(triggers, ev)
		}
		if !slices.Contains(classes[ev.Fingerprint], ev.Class) {
			classes[ev.Fingerprint] = append(classes[ev.Fingerprint], ev.Class)
		}
	}
	return triggers, classes
}

// TestSLOSlowDriftPagesABurn: three replicas' TTFT drifts up in steps of
// a few minutes (0.3 s, 0.35 s, 0.42 s, 0.5 s): at most 1.2x per step
// and 1.7x in all, which no detector calls an incident (queue_latency
// wants 3x and a 1 s tail). From the 0.42 s step every request misses the
// 400 ms objective, and the SLO pages on its own: one page, class
// slo_burn, for the model, with its SLI, objective, burn rates and budget.
func TestSLOSlowDriftPagesABurn(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		engines := map[string]*fakeEngine{}
		for _, name := range []string{"r0", "r1", "r2"} {
			engines[name] = newFakeEngine("org/model", healthyLoad())
		}
		run := startDaemon(t, sloDriftConfig, engines)
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		ttft := func(v float64) func() {
			return func() {
				for _, e := range engines {
					e.set(func(l *engineLoad) { l.TTFT = v })
				}
			}
		}
		s.at(35*time.Minute+5*time.Second, "TTFT 0.35 s", ttft(0.35))
		s.at(40*time.Minute+5*time.Second, "TTFT 0.42 s: every request over 400 ms", ttft(0.42))
		s.at(45*time.Minute+5*time.Second, "TTFT 0.5 s", ttft(0.5))
		s.at(55*time.Minute, "run stopped", nil)
		if err := run.stop(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
		evs := run.events()
		triggers, classes := sloPages(evs)
		if testing.Verbose() {
			t.Logf("timeline:\n%s", run.timeline(s.marks))
		}
		if len(triggers) != 1 || triggers[0].Class != "slo_burn" || triggers[0].Replica != "fleet/org/model" || triggers[0].Severity != detect.Critical {
			t.Fatalf("want one critical slo_burn page for the model; got:\n%s\nlog:\n%s", run.timeline(s.marks), run.stderr.String())
		}
		for fp, cs := range classes {
			if !slices.Equal(cs, []string{"slo_burn"}) {
				t.Errorf("incident %s shows %v: a detector fired on the drift", fp, cs)
			}
		}
		page := triggers[0]
		if at := page.At.Sub(run.start); at < 40*time.Minute || at > 48*time.Minute {
			t.Errorf("paged at t+%s; the drift crossed the objective at t+40m", at)
		}
		for _, want := range []string{`0% of requests had their first token within 0.4s over 5m (objective 99%): SLO "chat-ttft" burning at`,
			"the error budget is spent: ", "used (45m of the 1d period on record)"} {
			if !strings.Contains(page.Summary, want) {
				t.Errorf("summary %q lacks %q", page.Summary, want)
			}
		}
		var names []string
		for _, f := range page.Evidence {
			names = append(names, f.Name)
		}
		for _, want := range []string{"good share over 5m", "objective", "burn rate over 30m", "burn rate over 5m"} {
			if !slices.Contains(names, want) {
				t.Errorf("page evidence %v lacks %q", names, want)
			}
		}
	})
}

// sloStormConfig: short detector windows (the storm is minutes long) and
// a 10m/4m page rule, the memory spanning it before the storm: the burn
// outlasts the storm by minutes, the storm's incident drains it.
const sloStormConfig = `
listen_address: "127.0.0.1:9402"
log_level: warn
scrape: {interval: 5s}
evaluation: {interval: 10s}
detectors:
  preempt_storm: {range: 1m, baseline: 10m, min_retractions_per_second: 0.05, baseline_coverage: {min_span_share: 0.2}}
  queue_latency: {range: 1m, baseline: 10m, baseline_coverage: {min_span_share: 0.2}}
  decode_slowdown: {range: 1m, baseline: 10m, baseline_coverage: {min_span_share: 0.2}}
  kv_saturation: {range: 1m, baseline: 10m, baseline_coverage: {min_span_share: 0.2}}
alerts: {for: 30s, keep_firing_for: 1m, aftermath: 2m}
slos:
  policy:
    page: [{long: 10m, short: 4m, burn_rate: 14.4}]
    warning: []
  objectives:
    - {name: chat-ttft, model: org/model, kind: ttft, threshold: 1s, objective: 0.99, period: 24h}
`

// TestSLOStormPagesOnceNamedAfterTheStorm: a preemption storm on r0 (of
// two replicas) sends its TTFT to 4 s: half the model's requests miss the
// 1 s objective, a 50x burn. One incident pages, named after the storm on
// r0; the burn is on it (headline and evidence); no slo_burn incident
// pages on its own, not even while the storm's page drains after it.
func TestSLOStormPagesOnceNamedAfterTheStorm(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		engines := map[string]*fakeEngine{"r0": newFakeEngine("org/model", healthyLoad()), "r1": newFakeEngine("org/model", healthyLoad())}
		run := startDaemon(t, sloStormConfig, engines)
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		s.at(12*time.Minute+2500*time.Millisecond, "r0: preempt storm (3 retractions/s, KV 98%, TTFT 4 s)", func() {
			engines["r0"].set(func(l *engineLoad) {
				l.RetractionsPerSecond, l.KVUsage, l.ITL, l.TTFT, l.Queued = 3, 0.98, 0.06, 4, 60
			})
		})
		s.at(20*time.Minute+2500*time.Millisecond, "r0: healthy again", func() { engines["r0"].set(func(l *engineLoad) { *l = healthyLoad() }) })
		s.at(40*time.Minute, "run stopped", nil)
		// The postmortem draft says what the storm cost the SLO: r0's 8
		// minutes at 600 requests a minute, all over 1 s (4800 bad), against
		// a budget of 1% of the 28400 requests the memory held when the
		// incident resolved (23m40s at 1200 a minute).
		var postmortem string
		var record struct {
			Budgets []struct {
				Objective string
				Bad       float64 `json:"bad_events"`
				Allowed   float64 `json:"budget_events"`
			} `json:"slo_budgets"`
		}
		if tr, _ := sloPages(run.events()); len(tr) > 0 {
			_, body := apiGet(t, run, "/api/v1/incidents/"+tr[0].Incident)
			json.Unmarshal([]byte(body), &record)
			_, postmortem = apiGet(t, run, "/incidents/"+tr[0].Incident+"/postmortem.md")
		}
		if err := run.stop(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
		if len(record.Budgets) != 1 || record.Budgets[0].Bad < 4500 || record.Budgets[0].Bad > 5100 ||
			math.Abs(record.Budgets[0].Allowed-284) > 10 {
			t.Errorf("the incident's budgets: %+v; want about 4800 bad events against a budget of 284", record.Budgets)
		}
		if !strings.Contains(postmortem, `- Error budget consumed: `) || !strings.Contains(postmortem, `of the error budget of the SLO "chat-ttft" (TTFT ≤ 1s for 99%; `) {
			t.Errorf("the postmortem draft does not say what the storm cost the SLO:\n%s", postmortem)
		}
		evs := run.events()
		triggers, classes := sloPages(evs)
		defer func() {
			if t.Failed() || testing.Verbose() {
				t.Logf("timeline:\n%s\nlog:\n%s", run.timeline(s.marks), run.stderr.String())
			}
		}()
		if len(triggers) != 1 || triggers[0].Class != "preempt_storm" || triggers[0].Replica != "r0" {
			t.Fatalf("want one page, the storm on r0; got %d triggers", len(triggers))
		}
		if len(classes) != 1 {
			t.Errorf("events of %d incidents, want the storm's only: %v", len(classes), classes)
		}
		burnt := false
		for _, ev := range evs {
			if ev.Class == "slo_burn" {
				t.Errorf("an event is named slo_burn: %s %q", ev.Kind, ev.Summary)
			}
			if ev.Fingerprint != triggers[0].Fingerprint || !strings.Contains(ev.Summary, `burning the TTFT ≤ 1s for 99% SLO "chat-ttft" at`) {
				continue
			}
			for _, f := range ev.Evidence {
				if strings.HasPrefix(f.Name, `SLO "chat-ttft": burn rate over 10m`) {
					burnt = true
				}
			}
		}
		if !burnt {
			t.Error("no event of the storm's incident carries the burn (headline and burn rate evidence)")
		}
		var resolved bool
		for _, ev := range evs {
			resolved = resolved || (ev.Kind == notify.KindResolve && ev.Fingerprint == triggers[0].Fingerprint)
		}
		if !resolved {
			t.Error("the storm's incident never resolved")
		}
	})
}

// sloQuietConfig is the workbook's default policy (1h/5m and 6h/30m page
// rules, 1d/2h and 3d/6h warnings) over two objectives covering every
// model.
const sloQuietConfig = `
listen_address: "127.0.0.1:9402"
log_level: warn
scrape: {interval: 30s}
evaluation: {interval: 1m}
slos:
  objectives:
    - {name: ttft, kind: ttft, threshold: 400ms, objective: 0.995, period: 672h}
    - {name: availability, kind: availability, objective: 0.999, period: 672h}
`

// TestSLOHealthyFleetAtItsObjectivePagesNothing runs the default policy
// for 90 minutes over a model serving just within its objective (0.4% of
// requests over 400 ms against 0.5% allowed), a replica of it restarting
// (its counters start over from zero), and a quiet model whose every
// request misses the objective but which gets 2 requests a minute, too
// few for a verdict. No SLO burn pages; the API shows the model within its
// objective.
func TestSLOHealthyFleetAtItsObjectivePagesNothing(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		slow := healthyLoad()
		slow.RequestsPerSecond, slow.TTFT = 0.04, 0.6 // 0.4% of the model's 10 requests/s
		fast := healthyLoad()
		fast.RequestsPerSecond = 9.96
		quiet := healthyLoad()
		quiet.RequestsPerSecond, quiet.TTFT = 2.0/60, 2
		engines := map[string]*fakeEngine{
			"fast": newFakeEngine("org/model", fast), "slow": newFakeEngine("org/model", slow),
			"quiet": newFakeEngine("org/quiet", quiet),
		}
		run := startDaemon(t, sloQuietConfig, engines)
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		s.at(70*time.Minute+10*time.Second, "fast restarts: its counters start over", func() {
			e := engines["fast"]
			e.mu.Lock()
			e.counters = map[string]float64{}
			e.ttft, e.queue, e.itl = newFakeHistogram(fakeTTFTBounds), newFakeHistogram(fakeQueueTimeBounds), newFakeHistogram(fakeITLBounds)
			e.mu.Unlock()
		})
		s.at(90*time.Minute, "run stopped", nil)
		slos := run.apiSLOs(t)
		if err := run.stop(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
		// The restart is paged as what it is (replica_restarted), by its
		// detector; nothing else pages, and no page mentions an SLO.
		for _, ev := range run.events() {
			if ev.Class != "replica_restarted" || ev.Replica != "fast" || strings.Contains(ev.Summary, "SLO") {
				t.Errorf("a healthy fleet paged:\n%s\nlog:\n%s", run.timeline(s.marks), run.stderr.String())
				break
			}
		}
		got := fmt.Sprint(slos)
		if !strings.Contains(got, "ttft org/model sli=99.6% burning=false") {
			t.Errorf("the API's SLOs: %s", got)
		}
	})
}

// apiSLO is an objective on a model as GET /api/v1/slos shows it.
type apiSLO struct {
	Objective, Model, Severity string
	SLI                        float64
	HasSLI                     bool          `json:"has_sli"`
	Budget                     float64       `json:"budget_left"`
	Held                       time.Duration `json:"held"`
}

func (s apiSLO) String() string {
	return fmt.Sprintf("%s %s sli=%s burning=%v", s.Objective, s.Model, pct(s.SLI), s.Severity != "")
}

func pct(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }

// apiSLOs are the objectives of the daemon's last round.
func (r *daemonRun) apiSLOs(t *testing.T) []apiSLO {
	t.Helper()
	resp, err := r.api.Get("http://" + r.addr + "/api/v1/slos")
	if err != nil {
		t.Fatalf("GET /api/v1/slos: %v", err)
	}
	defer resp.Body.Close()
	var body struct{ SLOs []apiSLO }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET /api/v1/slos: %v", err)
	}
	return body.SLOs
}

// sloBackfillQuery is the SLO backfill's query shape: sum by (model_name,
// le) (increase({__name__=~"<name>"[,model_name="<m>"]...}[<d>])).
var sloBackfillQuery = regexp.MustCompile(`^sum by \(model_name, le\) \(increase\(\{__name__=~"([^"]+)"(?:,model_name="([^"]*)")?[^}]*\}\[(\w+)\]\)\)$`)

// increasesByModelAndLE answers the SLO backfill: at each step, the
// increase over the range of each series whose name matches (the value
// at the last sample at or before the step minus that at or before the
// range's start; the fake's counters never reset), summed by model_name
// and le.
func (p *fakePrometheus) increasesByModelAndLE(q string, start, end time.Time, step time.Duration) (any, bool) {
	m := sloBackfillQuery.FindStringSubmatch(q)
	if m == nil {
		return nil, false
	}
	name := regexp.MustCompile("^(?:" + m[1] + ")$")
	d, _ := time.ParseDuration(m[3])
	type key struct{ model, le string }
	sums := map[key]map[time.Time]float64{}
	valueAt := func(s *promSeries, at time.Time) (float64, bool) {
		i := sort.Search(len(s.ts), func(i int) bool { return s.ts[i].After(at) }) - 1
		if i < 0 {
			return 0, false
		}
		return s.vs[i], true
	}
	for _, s := range p.series {
		if !name.MatchString(s.metric["__name__"]) || (m[2] != "" && s.metric["model_name"] != m[2]) {
			continue
		}
		k := key{s.metric["model_name"], s.metric["le"]}
		for at := start; !at.After(end); at = at.Add(step) {
			now, ok := valueAt(s, at)
			before, okB := valueAt(s, at.Add(-d))
			if !ok || !okB {
				continue
			}
			if sums[k] == nil {
				sums[k] = map[time.Time]float64{}
			}
			sums[k][at] += now - before
		}
	}
	type row struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	rows := []row{}
	for k, vs := range sums {
		r := row{Metric: map[string]string{"model_name": k.model, "le": k.le}}
		for _, at := range slices.SortedFunc(maps.Keys(vs), func(a, b time.Time) int { return a.Compare(b) }) {
			r.Values = append(r.Values, [2]any{float64(at.UnixMilli()) / 1000, strconv.FormatFloat(vs[at], 'g', -1, 64)})
		}
		rows = append(rows, r)
	}
	return rows, true
}

// sloHistoryConfig: the drift test's objective and page rule, with
// history.url set by the test.
const sloHistoryConfig = `
listen_address: "127.0.0.1:9402"
log_level: info
scrape: {interval: 15s, health_probe: {enabled: false}}
evaluation: {interval: 30s}
slos:
  policy:
    page: [{long: 30m, short: 5m, burn_rate: 14.4}]
    warning: []
  objectives:
    - {name: chat-ttft, model: org/model, kind: ttft, threshold: 400ms, objective: 0.99, period: 24h}
`

// TestSLORestartWithHistoryKeepsTheBudget: Prometheus has scraped two
// replicas (10 requests/s each) for two hours, during which r0's TTFT
// went to 0.5 s for one minute: 600 requests over the 400 ms objective,
// 41% of a 99% objective's budget for the 146400 requests of the two
// hours and the two minutes after the restart. The watchdog (re)starts:
// with history.url its memory is filled from Prometheus and the API shows
// the 59% the blip left, over the two hours held; without it the memory
// starts empty, the budget whole. The blip is long over: nothing pages.
func TestSLORestartWithHistoryKeepsTheBudget(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	for _, withHistory := range []bool{true, false} {
		t.Run(fmt.Sprintf("history=%v", withHistory), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				engines := map[string]*fakeEngine{"r0": newFakeEngine("org/model", healthyLoad()), "r1": newFakeEngine("org/model", healthyLoad())}
				prom := newFakePrometheus()
				stop, scraped := make(chan struct{}), make(chan struct{})
				go func() { prom.scrapeEvery(15*time.Second, engines, stop); close(scraped) }()
				time.Sleep(60*time.Minute + 7*time.Second)
				engines["r0"].set(func(l *engineLoad) { l.TTFT = 0.5 })
				time.Sleep(time.Minute)
				engines["r0"].set(func(l *engineLoad) { l.TTFT = 0.3 })
				time.Sleep(59 * time.Minute)

				var setup func(*memnet.Network, *config.Config)
				if withHistory {
					setup = func(n *memnet.Network, cfg *config.Config) { prom.serveOn(t, n, cfg) }
				}
				run := startDaemonWith(t, sloHistoryConfig, engines, setup)
				time.Sleep(2 * time.Minute)
				slos := run.apiSLOs(t)
				if err := run.stop(); err != nil {
					t.Fatalf("daemon: %v", err)
				}
				close(stop)
				<-scraped
				if len(slos) != 1 {
					t.Fatalf("SLOs: %v\nlog:\n%s", slos, run.stderr.String())
				}
				st := slos[0]
				// 600 bad of 2 x 10/s x 122 minutes = 146400 requests.
				want, held := 1-600/(0.01*146400), 2*time.Hour
				if !withHistory {
					want, held = 1, 2*time.Minute
				}
				if math.Abs(st.Budget-want) > 0.02 || st.Held < held-5*time.Minute || st.Held > held+5*time.Minute {
					t.Errorf("budget left %s over %s held; want %s over about %s\nlog:\n%s", pct(st.Budget), st.Held, pct(want), held, run.stderr.String())
				}
				for _, ev := range run.events() {
					t.Errorf("paged: %s %s %q", ev.Kind, ev.Class, ev.Summary)
				}
			})
		})
	}
}
