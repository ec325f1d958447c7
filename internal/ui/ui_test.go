package ui

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/html"

	"github.com/sglang-watchdog/sglang-watchdog/configs"
	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

type discard struct{}

func (discard) Send(notify.Event) {}

// fakeJournal is an incident.Reader over fixed records.
type fakeJournal struct{ records []incident.Record }

func (j fakeJournal) Incidents() []incident.Record { return j.records }
func (j fakeJournal) Incident(id string) (incident.Record, bool) {
	for _, r := range j.records {
		if r.ID == id {
			return r, true
		}
	}
	return incident.Record{}, false
}

// silencing marks every alert of one replica silenced, as the evaluation
// loop does for a matching silence.
type silencing struct {
	loop    *eval.Loop
	replica string
}

func (s silencing) Alerts() []alert.Incident {
	as := s.loop.Alerts()
	for i := range as {
		if as[i].Replica == s.replica {
			as[i].SilencedBy = []string{"maint-42"}
		}
	}
	return as
}
func (s silencing) Round() assess.Round { return s.loop.Round() }

// fleetRun is two simulated fleets (sim-0..2 serving one model with a
// preempt storm on sim-0, b-sim-0..1 serving another, healthy) scraped
// into a real window store and evaluated by the real loop with the demo's
// detector settings.
type fleetRun struct {
	store *window.Store
	loop  *eval.Loop
	at    time.Time
}

const otherModel = "meta-llama/Llama-3.1-8B"

var (
	fleetOnce sync.Once
	fleetRes  fleetRun
	fleetErr  error
)

func simulatedFleet(t *testing.T) fleetRun {
	t.Helper()
	fleetOnce.Do(func() { fleetRes, fleetErr = runFleet() })
	if fleetErr != nil {
		t.Fatal(fleetErr)
	}
	return fleetRes
}

func runFleet() (fleetRun, error) {
	cfg, err := config.Parse(config.Default(), configs.Demo())
	if err != nil {
		return fleetRun{}, err
	}
	start := time.Date(2026, 5, 29, 13, 0, 0, 0, time.UTC)
	storm, err := sim.IncidentScenario(sim.ClassPreemptStorm)
	if err != nil {
		return fleetRun{}, err
	}
	fleets := []*sim.Fleet{
		sim.NewFleet(sim.FleetConfig{Replicas: 3, Seed: 1, Start: start, Scenario: storm, Warmup: time.Minute}),
		sim.NewFleet(sim.FleetConfig{Replicas: 2, Seed: 2, Start: start, Model: otherModel, Warmup: time.Minute}),
	}
	const interval = 2 * time.Second
	store, err := window.New(window.Options{Retention: 10 * time.Minute, ScrapeInterval: interval}, nil)
	if err != nil {
		return fleetRun{}, err
	}
	ds, err := detect.New(cfg.Detectors)
	if err != nil {
		return fleetRun{}, err
	}
	loop := eval.New(eval.Options{Interval: interval,
		Assessor: assess.New(ds, assess.Config{Triage: cfg.Detectors.Triage, Correlation: cfg.Correlation}),
		Tracker:  alert.NewTracker(cfg.Alerts), Windows: store, Sender: discard{}, Logger: zap.NewNop()}, nil)
	var targets []scrape.Target
	for fi, f := range fleets {
		for i, name := range f.Replicas() {
			srv := httptest.NewServer(f.Handler(i))
			defer srv.Close()
			if fi == 1 {
				name = "b-" + name
			}
			targets = append(targets, scrape.Target{Name: name, URL: srv.URL + "/metrics", Kind: scrape.KindEngine})
		}
	}
	end := start.Add(sim.IncidentBaseline + 75*time.Second)
	at := start
	for ; !at.After(end); at = at.Add(interval) {
		for _, f := range fleets {
			f.Advance(at)
		}
		for _, tg := range targets {
			sc := scrape.ScrapeOnce(context.Background(), nil, tg, scrape.Options{})
			sc.At = at // synthetic time: the simulation and the window share it
			if err := store.Append(sc); err != nil {
				return fleetRun{}, err
			}
		}
		loop.Evaluate(at)
	}
	return fleetRun{store: store, loop: loop, at: at.Add(-interval)}, nil
}

// journalFor records the run's open alerts as the journal would, plus a
// resolved incident, with signals whose thresholds and baselines vary.
func journalFor(run fleetRun) fakeJournal {
	var j fakeJournal
	for _, a := range run.loop.Alerts() {
		j.records = append(j.records, incident.Record{Summary: incident.Summary{ID: alert.IncidentID(a.Fingerprint, a.ActiveAt), Fingerprint: a.Fingerprint,
			Class: a.Class, Replica: a.Replica, Model: a.Model, Replicas: []string{a.Replica}, State: a.State, Severity: a.Severity,
			OpenedAt: a.ActiveAt, FiredAt: a.FiredAt, Headline: a.Finding.Summary}, Diagnosis: a.Finding.Diagnosis, Runbook: a.Finding.Runbook})
	}
	t0 := run.at.Add(-10 * time.Minute)
	pts := func(base bool) []incident.Point {
		var ps []incident.Point
		for i := range 10 {
			ps = append(ps, incident.Point{At: t0.Add(time.Duration(i) * time.Minute), Value: float64(i), Baseline: 1, HasBaseline: base})
		}
		return ps
	}
	j.records = append(j.records, incident.Record{Summary: incident.Summary{
		ID: "resolved-1", Class: detect.PreemptStorm, Replica: "sim-1", Model: "Qwen/Qwen3-8B", Replicas: []string{"sim-1"},
		State: alert.StateResolved, Severity: detect.Critical, OpenedAt: t0, FiredAt: t0.Add(2 * time.Minute), ResolvedAt: t0.Add(9 * time.Minute),
		Headline: "Preempt storm on sim-1", Chain: []detect.Class{detect.PreemptStorm, detect.QueueLatency}},
		Diagnosis: "KV pool full", Runbook: "/runbooks/preempt_storm",
		Emergency: []string{"shed the batch job"}, RootCause: []string{"cap the prompt length"},
		Signals: []incident.Signal{
			{Name: "retractions/s", Unit: "/s", Threshold: "> 0.1/s", Limit: 0.1, HasLimit: true, Points: pts(true)},
			{Name: "KV usage", Unit: "ratio", Points: scaled(pts(false), 0.1)},
			{Name: "queued", Threshold: "> 3x baseline", Limit: 3, HasLimit: true, Points: withLimit(pts(true), 3)},
			{Name: "KV page size", Unit: "tokens", Points: constantPoints(pts(false), 16)},
			{Name: "TTFT p99", Unit: "s", Threshold: ">= 3x baseline and >= 1 s", Points: pts(true)},
			{Name: "aborted requests/s", Unit: "/s", Threshold: ">= 1/s", Limit: 1, HasLimit: true, Points: pts(false)},
			{Name: "pod restarts", Threshold: ">= 3", Points: constantPoints(pts(false), 3)},
		},
		Impact: []incident.Signal{{Name: incident.ImpactQueued, Points: pts(false)}, {Name: incident.ImpactTTFT, Unit: "s", Points: pts(false)},
			{Name: incident.ImpactRunning, Points: constantPoints(pts(false), 128)}},
		Timeline: []incident.Event{{At: t0, Kind: incident.EventFirstFinding, Text: "retractions seen"},
			{At: t0.Add(2 * time.Minute), Kind: incident.EventNotified, Text: "trigger", Integration: "slack"}},
		Deliveries: []incident.Delivery{
			{At: t0.Add(2 * time.Minute), Integration: "pagerduty", Kind: "trigger", Attempt: 1, OK: false, Error: "http 503"},
			{At: t0.Add(2*time.Minute + 5*time.Second), Integration: "pagerduty", Kind: "trigger", Attempt: 2, OK: true},
			{At: t0.Add(2 * time.Minute), Integration: "slack", Kind: "trigger", Attempt: 1, OK: true},
		},
	})
	return j
}

// scaled multiplies every point's value by k.
func scaled(ps []incident.Point, k float64) []incident.Point {
	for i := range ps {
		ps[i].Value *= k
	}
	return ps
}

// constantPoints sets every point's value to v.
func constantPoints(ps []incident.Point, v float64) []incident.Point {
	for i := range ps {
		ps[i].Value = v
	}
	return ps
}

// withLimit gives every point a limit of factor times its baseline.
func withLimit(ps []incident.Point, factor float64) []incident.Point {
	for i := range ps {
		ps[i].Limit, ps[i].HasLimit = factor*ps[i].Baseline, true
	}
	return ps
}

func newTestServer(t *testing.T, opts Options) *httptest.Server {
	t.Helper()
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func workspace(t *testing.T, pageSize int) (*httptest.Server, fleetRun, fakeJournal) {
	run := simulatedFleet(t)
	j := journalFor(run)
	return newTestServer(t, Options{Alerts: silencing{loop: run.loop, replica: "sim-0"}, Windows: run.store, Incidents: j,
		Span: time.Hour, MinStep: 10 * time.Second, PageSize: pageSize}), run, j
}

// get fetches path and parses the page.
func get(t *testing.T, srv *httptest.Server, path string, wantStatus int) *html.Node {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != wantStatus {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: status %d, want %d\n%s", path, resp.StatusCode, wantStatus, b)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("GET %s: Content-Security-Policy %q must forbid scripts", path, csp)
	}
	doc, err := html.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func hasClass(n *html.Node, class string) bool {
	return slices.Contains(strings.Fields(attr(n, "class")), class)
}

// find returns the elements under n with the tag and, if given, class.
func find(n *html.Node, tag, class string) []*html.Node {
	var out []*html.Node
	for d := range n.Descendants() {
		if d.Type == html.ElementNode && d.Data == tag && (class == "" || hasClass(d, class)) {
			out = append(out, d)
		}
	}
	return out
}

// byID is the element with the id.
func byID(n *html.Node, id string) *html.Node {
	for d := range n.Descendants() {
		if d.Type == html.ElementNode && attr(d, "id") == id {
			return d
		}
	}
	return &html.Node{}
}

func text(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

// checkAccessibleSVGs: every drawing has an accessible name and a title.
func checkAccessibleSVGs(t *testing.T, page string, doc *html.Node) {
	t.Helper()
	for _, svg := range find(doc, "svg", "") {
		if attr(svg, "aria-label") == "" || attr(svg, "role") != "img" || len(find(svg, "title", "")) == 0 {
			t.Errorf("%s: an svg lacks role=img, aria-label or <title>", page)
		}
	}
	for n := range doc.Descendants() {
		for _, a := range n.Attr {
			if strings.HasPrefix(a.Key, "on") || a.Key == "style" {
				t.Errorf("%s: <%s %s=...>: no inline handlers or styles", page, n.Data, a.Key)
			}
		}
	}
	if len(find(doc, "script", "")) > 0 {
		t.Errorf("%s: has a <script>", page)
	}
}

func rowNames(doc *html.Node) []string {
	var names []string
	for _, tr := range find(doc, "tr", "replica") {
		names = append(names, text(find(tr, "a", "")[0]))
	}
	return names
}

func TestFleetPageOrdersIncidentsFirstAndLinksResolve(t *testing.T) {
	srv, run, _ := workspace(t, 100)
	doc := get(t, srv, "/", http.StatusOK)
	checkAccessibleSVGs(t, "/", doc)

	names := rowNames(doc)
	if len(names) != 5 {
		t.Fatalf("rows %v, want the 5 replicas", names)
	}
	if names[0] != "sim-0" {
		t.Errorf("first row %s, want sim-0, the replica with the firing incident", names[0])
	}
	firstRow := find(doc, "tr", "replica")[0]
	if !hasClass(firstRow, "firing") {
		t.Errorf("sim-0's row is not marked firing")
	}
	// One sparkline per replica, drawn with one series path each.
	for _, tr := range find(doc, "tr", "replica") {
		if n := len(find(tr, "svg", "spark")); n != 1 {
			t.Errorf("row %s: %d sparklines, want 1", text(tr), n)
		}
		if n := len(find(tr, "path", "series")); n != 1 {
			t.Errorf("row %s: sparkline with %d series paths, want 1", text(find(tr, "a", "")[0]), n)
		}
	}
	// The round's snapshot is what the table shows.
	rep, _ := run.loop.Round().Replica("sim-0")
	if got, want := text(find(firstRow, "td", "")[3]), optValue(rep.Snapshot.QueuedRequests, ""); got != want {
		t.Errorf("sim-0 queued shown %q, round's snapshot %q", got, want)
	}
	if got, want := text(find(firstRow, "td", "")[7]), ttftValue(rep.Snapshot); got != want {
		t.Errorf("sim-0 TTFT shown %q, round's snapshot %q", got, want)
	}

	open := find(doc, "li", "incident")
	if len(open) == 0 {
		t.Fatal("no open incident listed; the storm on sim-0 should be")
	}
	if !hasClass(open[0], "firing") || !strings.Contains(text(open[0]), "preempt_storm on sim-0") {
		t.Errorf("first open incident %q, want the firing preempt storm on sim-0", text(open[0]))
	}
	if len(find(open[0], "span", "silenced")) != 1 || !strings.Contains(text(open[0]), "maint-42") {
		t.Errorf("sim-0's incident is not shown as silenced by maint-42: %q", text(open[0]))
	}

	// Every link into the workspace resolves.
	links := 0
	for _, a := range find(doc, "a", "") {
		href := attr(a, "href")
		if strings.HasPrefix(href, "/incidents/") || strings.HasPrefix(href, "/replicas/") {
			get(t, srv, href, http.StatusOK)
			links++
		}
	}
	if links < 6 {
		t.Errorf("%d workspace links, want every replica's and the incidents'", links)
	}
}

func TestFleetPageFiltersByModel(t *testing.T) {
	srv, _, _ := workspace(t, 100)
	doc := get(t, srv, "/?model="+url.QueryEscape(otherModel), http.StatusOK)
	names := rowNames(doc)
	if !slices.Equal(names, []string{"b-sim-0", "b-sim-1"}) {
		t.Errorf("rows for %s: %v", otherModel, names)
	}
	if n := len(find(doc, "li", "incident")); n != 0 {
		t.Errorf("%d open incidents shown for the healthy model, want 0", n)
	}
	var selected []string
	for _, o := range find(doc, "option", "") {
		if slices.ContainsFunc(o.Attr, func(a html.Attribute) bool { return a.Key == "selected" }) {
			selected = append(selected, attr(o, "value"))
		}
	}
	if !slices.Equal(selected, []string{otherModel}) {
		t.Errorf("selected model options %v", selected)
	}
}

func TestFleetPagePaginates(t *testing.T) {
	srv, _, _ := workspace(t, 2)
	var all []string
	path := "/"
	for range 5 {
		doc := get(t, srv, path, http.StatusOK)
		all = append(all, rowNames(doc)...)
		next := find(doc, "a", "")
		path = ""
		for _, a := range next {
			if attr(a, "rel") == "next" {
				path = attr(a, "href")
			}
		}
		if path == "" {
			break
		}
	}
	if len(all) != 5 || all[0] != "sim-0" {
		t.Errorf("pages listed %v, want the 5 replicas once each, sim-0 first", all)
	}
	slices.Sort(all)
	if len(slices.Compact(all)) != 5 {
		t.Errorf("a replica is listed twice: %v", all)
	}
}

// signalByName is the record's signal of that name.
func signalByName(t *testing.T, signals []incident.Signal, name string) incident.Signal {
	t.Helper()
	for _, s := range signals {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no signal %q", name)
	return incident.Signal{}
}

// plotName is the signal a plot shows: its caption's first line.
func plotName(fig *html.Node) string {
	cap := find(fig, "figcaption", "")[0]
	for c := cap.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			return strings.TrimSpace(c.Data)
		}
	}
	return ""
}

// checkSignalPlot checks one plot against its signal: one value line, a
// baseline when the signal has one, the threshold through each round's
// limit, the incident's three marks labelled, ticks in the signal's unit
// and the table of the same numbers.
func checkSignalPlot(t *testing.T, p *html.Node, s incident.Signal) {
	t.Helper()
	if n := len(find(p, "path", "series")); n != 1 {
		t.Errorf("%s: %d value paths, want 1", s.Name, n)
	}
	wantBase := 0
	if s.Points[0].HasBaseline {
		wantBase = 1
	}
	if n := len(find(p, "path", "baseline")); n != wantBase {
		t.Errorf("%s: %d baseline paths, want %d", s.Name, n, wantBase)
	}
	wantLimit := 0
	if s.HasLimit {
		wantLimit = 1
	}
	if n := len(find(p, "path", "threshold")); n != wantLimit {
		t.Errorf("%s: %d threshold lines, want %d (HasLimit %v)", s.Name, n, wantLimit, s.HasLimit)
	}
	if th := find(p, "path", "threshold"); len(th) == 1 && s.Points[0].HasLimit {
		// A limit that moves with the baseline is drawn through each round's.
		if n := strings.Count(attr(th[0], "d"), "L") + 1; n != len(s.Points) {
			t.Errorf("%s: threshold drawn through %d points, want the %d rounds' limits", s.Name, n, len(s.Points))
		}
	}
	if n := len(find(p, "line", "marker")); n != 3 {
		t.Errorf("%s: %d markers, want onset, fired and resolved", s.Name, n)
	}
	var marks []string
	for _, l := range find(p, "text", "mark-label") {
		marks = append(marks, strings.Fields(text(l))[0])
	}
	if !slices.Equal(marks, []string{"onset", "fired", "resolved"}) {
		t.Errorf("%s: marks labelled %v, want onset, fired, resolved", s.Name, marks)
	}
	ticks := find(p, "text", "y")
	if len(ticks) < 3 {
		t.Errorf("%s: %d value ticks, want a scale of at least 3", s.Name, len(ticks))
	}
	for _, tk := range ticks {
		if want := formatValue(0, s.Unit)[1:]; !strings.HasSuffix(text(tk), want) {
			t.Errorf("%s: value tick %q without its unit %q", s.Name, text(tk), want)
		}
	}
	if rows := find(find(p, "tbody", "")[0], "tr", ""); len(rows) != len(s.Points) {
		t.Errorf("%s: table fallback has %d rows, want %d", s.Name, len(rows), len(s.Points))
	}
}

func TestIncidentPagePlotsEvidence(t *testing.T) {
	srv, _, j := workspace(t, 100)
	rec := j.records[len(j.records)-1]
	doc := get(t, srv, "/incidents/"+rec.ID, http.StatusOK)
	checkAccessibleSVGs(t, "incident", doc)

	if h1 := find(doc, "h1", ""); len(h1) != 1 || text(h1[0]) != rec.Headline {
		t.Errorf("headline %q", text(h1[0]))
	}

	// The signals with a rule lead, at most three, in the journal's order,
	// large; the fourth with a rule and those without one are folded.
	lead := find(byID(doc, "decisive-plots"), "figure", "plot")
	var leadNames []string
	for _, p := range lead {
		leadNames = append(leadNames, plotName(p))
		if !hasClass(p, "lead") || attr(find(p, "svg", "")[0], "viewBox") != "0 0 960 340" {
			t.Errorf("%s: not drawn as a large plot", plotName(p))
		}
	}
	if want := []string{"retractions/s", "queued", "TTFT p99"}; !slices.Equal(leadNames, want) {
		t.Errorf("decisive plots %v, want %v", leadNames, want)
	}
	more := byID(doc, "more-evidence")
	if more.Data != "details" || slices.ContainsFunc(more.Attr, func(a html.Attribute) bool { return a.Key == "open" }) {
		t.Errorf("the other signals are not in a folded <details>")
	}
	folded := find(byID(doc, "evidence-plots"), "figure", "plot")
	var foldedNames []string
	for _, p := range folded {
		foldedNames = append(foldedNames, plotName(p))
		if hasClass(p, "lead") {
			t.Errorf("%s: a folded plot drawn large", plotName(p))
		}
	}
	if want := []string{"KV usage", "aborted requests/s"}; !slices.Equal(foldedNames, want) {
		t.Errorf("folded plots %v, want %v", foldedNames, want)
	}
	if all := find(doc, "figure", "plot"); len(all) < 2 || all[0] != lead[0] {
		t.Errorf("the page does not open its plots with the decisive ones")
	}
	for _, p := range slices.Concat(lead, folded) {
		checkSignalPlot(t, p, signalByName(t, rec.Signals, plotName(p)))
	}

	// Constants are facts, never plotted.
	facts := map[string]string{}
	dts, dds := find(byID(doc, "evidence-facts"), "dt", ""), find(byID(doc, "evidence-facts"), "dd", "")
	for i := range dts {
		facts[text(dts[i])] = text(dds[i])
	}
	if len(facts) != 2 || !strings.HasPrefix(facts["KV page size"], "16 tokens") || !strings.HasPrefix(facts["pod restarts"], "3 (rule >= 3)") {
		t.Errorf("evidence facts %q, want KV page size 16 tokens and pod restarts 3 with its rule", facts)
	}
	if !strings.Contains(facts["KV page size"], "unchanged over 10 rounds") {
		t.Errorf("KV page size fact %q does not say it held over the incident", facts["KV page size"])
	}
	for _, p := range find(doc, "figure", "plot") {
		if n := plotName(p); n == "KV page size" || n == "pod restarts" || n == incident.ImpactRunning {
			t.Errorf("the constant %s is plotted", n)
		}
	}

	// Shares print in percent: the KV usage's ticks and numbers.
	kv := folded[0]
	for _, tr := range find(find(kv, "tbody", "")[0], "tr", "") {
		if v := text(find(tr, "td", "")[1]); !strings.HasSuffix(v, "%") {
			t.Errorf("KV usage printed %q, want percent", v)
		}
	}
	if got := text(find(find(kv, "tbody", "")[0], "tr", "")[5]); !strings.Contains(got, "50%") {
		t.Errorf("KV usage row 5 %q, want 50%%", got)
	}

	impact := find(byID(doc, "impact-plots"), "figure", "plot")
	if len(impact) != 2 || byID(doc, "more-impact").Data != "details" {
		t.Errorf("%d impact plots folded, want the 2 that moved", len(impact))
	}
	if got := text(byID(doc, "impact-facts")); !strings.Contains(got, incident.ImpactRunning) || !strings.Contains(got, "128") {
		t.Errorf("impact facts %q, want running requests 128", got)
	}
	if rows := find(find(doc, "table", "deliveries")[0], "tr", ""); len(rows) != len(rec.Deliveries)+1 {
		t.Errorf("delivery table has %d rows, want %d and a header", len(rows), len(rec.Deliveries))
	}
	hrefs := map[string]bool{}
	for _, a := range find(doc, "a", "") {
		hrefs[attr(a, "href")] = true
	}
	for _, want := range []string{
		"/incidents/resolved-1/postmortem",
		"/silences/new?incident=resolved-1&model=Qwen%2FQwen3-8B&replica=sim-1",
		"/runbooks/preempt_storm", "/replicas/sim-1",
	} {
		if !hrefs[want] {
			t.Errorf("no link to %s", want)
		}
	}
	if n := len(find(find(doc, "ol", "chain")[0], "li", "")); n != 2 {
		t.Errorf("causal chain has %d steps, want 2", n)
	}
}

func TestOpenIncidentPageHasNoPostmortemLinkAndNoResolveMarker(t *testing.T) {
	srv, run, _ := workspace(t, 100)
	var a alert.Incident
	for _, x := range run.loop.Alerts() {
		if x.State == alert.StateFiring && x.Replica == "sim-0" {
			a = x
		}
	}
	doc := get(t, srv, "/incidents/"+alert.IncidentID(a.Fingerprint, a.ActiveAt), http.StatusOK)
	for _, l := range find(doc, "a", "") {
		if strings.HasSuffix(attr(l, "href"), "/postmortem") {
			t.Errorf("open incident links to a postmortem")
		}
	}
}

func TestUnknownPagesAnswer404Pages(t *testing.T) {
	srv, _, _ := workspace(t, 100)
	for path, want := range map[string]string{
		"/incidents/no-such-id": "Incident not found",
		"/replicas/no-such":     "Replica not found",
	} {
		doc := get(t, srv, path, http.StatusNotFound)
		if h1 := find(doc, "h1", ""); len(h1) != 1 || text(h1[0]) != want {
			t.Errorf("%s: heading %q, want %q", path, text(doc), want)
		}
	}
	run := simulatedFleet(t)
	noJournal := newTestServer(t, Options{Alerts: run.loop, Windows: run.store})
	doc := get(t, noJournal, "/incidents/x", http.StatusNotFound)
	if h1 := find(doc, "h1", ""); len(h1) != 1 || text(h1[0]) != "No incident journal" {
		t.Errorf("without a journal: %q", text(doc))
	}
}

func TestReplicaPagePlotsKeySeries(t *testing.T) {
	srv, run, _ := workspace(t, 100)
	doc := get(t, srv, "/replicas/sim-0", http.StatusOK)
	checkAccessibleSVGs(t, "replica", doc)
	plots := find(doc, "figure", "plot")
	if len(plots) != len(keySeries) {
		t.Fatalf("%d plots, want %d", len(plots), len(keySeries))
	}
	for i, p := range plots {
		if n := len(find(p, "path", "series")); n != 1 {
			t.Errorf("%s: %d series paths, want 1", keySeries[i].Title, n)
		}
		if n := len(find(p, "path", "threshold")); n != 0 {
			t.Errorf("%s: a threshold line on a plot without a limit", keySeries[i].Title)
		}
	}
	// The newest step of the plot ends at the round, over the same range
	// the table's numbers come from: its retractions are the storm's.
	rep, _ := run.loop.Round().Replica("sim-0")
	body := text(doc)
	if !strings.Contains(body, formatTime(rep.Scrape.LastAttempt)) {
		t.Errorf("last scrape time %s not shown", formatTime(rep.Scrape.LastAttempt))
	}
	if !strings.Contains(body, "preempt_storm") {
		t.Errorf("the round's preempt storm finding is not listed")
	}
}

// withFleetIncident adds a firing fleet incident over the model's three
// replicas, with its members' alerts folded into it.
type withFleetIncident struct{ loop *eval.Loop }

func (f withFleetIncident) Round() assess.Round { return f.loop.Round() }
func (f withFleetIncident) Alerts() []alert.Incident {
	replicas := []string{"sim-0", "sim-1", "sim-2"}
	at := f.loop.Round().At.Add(-time.Minute)
	fleet := alert.Incident{Fingerprint: "fleetfp", Class: detect.CacheCollapse, Replica: "Qwen/Qwen3-8B", Model: "Qwen/Qwen3-8B", Fleet: true,
		State: alert.StateFiring, Severity: detect.Warning, ActiveAt: at,
		Finding: detect.Finding{Summary: "prefix cache collapsed across the fleet", AffectedReplicas: replicas}}
	out := []alert.Incident{fleet}
	for _, r := range replicas {
		out = append(out, alert.Incident{Fingerprint: "m-" + r, Class: detect.CacheCollapse, Replica: r, Model: "Qwen/Qwen3-8B",
			State: alert.StateFiring, Severity: detect.Warning, ActiveAt: at, AbsorbedBy: "fleetfp"})
	}
	return out
}

func TestFleetIncidentGroupsItsReplicas(t *testing.T) {
	run := simulatedFleet(t)
	srv := newTestServer(t, Options{Alerts: withFleetIncident{loop: run.loop}, Windows: run.store, MinStep: 10 * time.Second})
	doc := get(t, srv, "/", http.StatusOK)
	open := find(doc, "li", "incident")
	if len(open) != 1 {
		t.Fatalf("%d open incidents listed, want the one fleet incident (members folded in)", len(open))
	}
	if got := text(find(open[0], "span", "members")[0]); got != "replicas: sim-0, sim-1, sim-2" {
		t.Errorf("fleet incident members %q", got)
	}
	if href := attr(find(open[0], "a", "")[0], "href"); href != "/incidents/"+alert.IncidentID("fleetfp", run.loop.Round().At.Add(-time.Minute)) {
		t.Errorf("fleet incident links to %s", href)
	}
	names := rowNames(doc)
	if !slices.Equal(names[:3], []string{"sim-0", "sim-1", "sim-2"}) {
		t.Errorf("rows %v: the fleet incident's replicas come first", names)
	}
}

// TestEveryURLUnderThePathPrefix: behind an Ingress path the workspace is
// reached at /watchdog/ with the prefix stripped, as the server strips it.
// Every link, form action and stylesheet on every page starts with the
// prefix, and those the workspace serves load.
func TestEveryURLUnderThePathPrefix(t *testing.T) {
	h, _, _ := sloWorkspace(t, "/watchdog")
	mux := http.NewServeMux()
	mux.Handle("/watchdog/", http.StripPrefix("/watchdog", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	seen := map[string]bool{}
	queue := []string{"/watchdog/"}
	pages := 0
	for len(queue) > 0 {
		page := queue[0]
		queue = queue[1:]
		if seen[page] {
			continue
		}
		seen[page] = true
		pages++
		doc := get(t, srv, page, http.StatusOK)
		var walk func(n *html.Node)
		walk = func(n *html.Node) {
			for _, key := range []string{"href", "src", "action"} {
				u := attr(n, key)
				if u == "" || strings.HasPrefix(u, "#") || strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") {
					continue
				}
				if !strings.HasPrefix(u, "/watchdog/") {
					t.Errorf("%s: <%s %s=%q> is outside /watchdog/", page, n.Data, key, u)
					continue
				}
				rest, _, _ := strings.Cut(strings.TrimPrefix(u, "/watchdog"), "#")
				switch {
				case strings.HasPrefix(rest, "/ui/"):
					resp, err := http.Get(srv.URL + u)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("%s: %s answers %d", page, u, resp.StatusCode)
					}
				case rest == "/" || strings.HasPrefix(rest, "/?") || strings.HasPrefix(rest, "/incidents/") || strings.HasPrefix(rest, "/replicas/") || rest == "/slos":
					if !strings.HasSuffix(rest, "/postmortem") && n.Data != "form" {
						queue = append(queue, "/watchdog"+rest)
					}
				}
			}
			for c := n.FirstChild; c != nil; c = c.NextSibling {
				walk(c)
			}
		}
		walk(doc)
	}
	// The fleet's pages, the incidents, the five replicas and the SLOs at least.
	if pages < 11 || !seen["/watchdog/slos"] || !seen["/watchdog/incidents/drift-1"] {
		t.Errorf("followed %d pages under the prefix: %v", pages, seen)
	}
}

// A replica whose queued requests got no first token has no TTFT p99 to
// show; the table says why, as the page's headline does.
func TestTTFTCellSaysWhenNoRequestStarted(t *testing.T) {
	v := func(f float64) *float64 { return &f }
	for _, tc := range []struct {
		s    assess.Snapshot
		want string
	}{
		{assess.Snapshot{ObservedSeconds: 20, FirstTokens: v(0), QueuedRequests: v(179)}, "no first token in 20s"},
		{assess.Snapshot{ObservedSeconds: 20, FirstTokens: v(12), QueuedRequests: v(179), TTFTP99: v(19.8)}, "19.8 s"},
		{assess.Snapshot{ObservedSeconds: 20, QueuedRequests: v(179)}, "–"},
	} {
		if got := ttftValue(tc.s); got != tc.want {
			t.Errorf("ttftValue(%+v) = %q; want %q", tc.s, got, tc.want)
		}
	}
}
