package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

const (
	burningModel = "Qwen/Qwen3-8B"
	healthyModel = "healthy/model"
	quietModel   = "quiet/model"
)

// sloStatuses are the statuses a real SLO memory reports after 130
// minutes of 1000 events a minute per model: the TTFT objective burning
// at 20x on burningModel (80% good against 99%), healthy at 0.1x on
// healthyModel (99.9% good), and with no events yet on quietModel.
func sloStatuses(at time.Time) []slo.Status {
	cfg := slo.Config{
		Policy: slo.Policy{
			Page:      []slo.Window{{Long: 60 * time.Minute, Short: 5 * time.Minute, BurnRate: 14.4}},
			Warning:   []slo.Window{{Long: 120 * time.Minute, Short: 10 * time.Minute, BurnRate: 3}},
			MinEvents: 20,
		},
		Objectives: []slo.Objective{
			{Name: "chat-ttft", Kind: slo.TTFT, Threshold: time.Second, Target: 0.99, Period: 24 * time.Hour},
			{Name: "chat-availability", Kind: slo.Availability, Target: 0.995, Period: 24 * time.Hour},
		},
	}
	book := slo.NewBook(cfg)
	start := at.Add(-130 * time.Minute)
	for m := start; !m.After(at); m = m.Add(time.Minute) {
		book.Record(m, []slo.Sample{
			{Objective: "chat-ttft", Model: burningModel, Events: slo.Events{Good: 800, Total: 1000}, Boundary: 1},
			{Objective: "chat-ttft", Model: healthyModel, Events: slo.Events{Good: 999, Total: 1000}, Boundary: 1},
			{Objective: "chat-ttft", Model: quietModel, Boundary: 1},
			{Objective: "chat-availability", Model: burningModel, Events: slo.Events{Good: 1000, Total: 1000}},
		})
	}
	return book.Status(at, nil)
}

// withSLOs is a loop's alerts and round with the SLO statuses added.
type withSLOs struct {
	loop Alerts
	slos []slo.Status
}

func (w withSLOs) Alerts() []alert.Incident { return w.loop.Alerts() }

func (w withSLOs) Round() assess.Round {
	r := w.loop.Round()
	r.SLOs = w.slos
	return r
}

// budgetJournal is the run's journal with the resolved storm on
// burningModel having spent half the TTFT budget and none of the
// availability budget, and an open incident spending a little more.
func budgetJournal(run fleetRun) fakeJournal {
	j := journalFor(run)
	for i := range j.records {
		if j.records[i].ID == "resolved-1" {
			j.records[i].Budgets = []incident.BudgetSpent{
				{Objective: "chat-ttft", Title: "TTFT ≤ 1s for 99%", Bad: 650, Total: 3250, Allowed: 1300, Period: 24 * time.Hour, Held: 130 * time.Minute},
				{Objective: "chat-availability", Title: "availability 99.5%", Bad: 0, Total: 3250, Allowed: 650, Period: 24 * time.Hour, Held: 130 * time.Minute},
			}
		}
	}
	j.records = append(j.records, incident.Record{Summary: incident.Summary{ID: "drift-1", Class: "slo_burn", Replica: "fleet", Model: burningModel,
		Replicas: []string{"sim-0"}, State: alert.StateFiring, Severity: detect.Critical, OpenedAt: run.at.Add(-5 * time.Minute),
		Headline: "<b>drift</b> burning"},
		Budgets: []incident.BudgetSpent{{Objective: "chat-ttft", Title: "TTFT ≤ 1s for 99%", Bad: 13, Total: 65, Allowed: 1300, Period: 24 * time.Hour, Held: 24 * time.Hour}}})
	return j
}

func sloWorkspace(t *testing.T, prefix string) (*Handler, fleetRun, []slo.Status) {
	t.Helper()
	run := simulatedFleet(t)
	statuses := sloStatuses(run.loop.Round().At)
	h, err := New(Options{Alerts: withSLOs{loop: silencing{loop: run.loop, replica: "sim-0"}, slos: statuses}, Windows: run.store,
		Incidents: budgetJournal(run), Span: time.Hour, MinStep: 10 * time.Second, PageSize: 2, PathPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return h, run, statuses
}

func statusOf(t *testing.T, statuses []slo.Status, objective, model string) slo.Status {
	t.Helper()
	for _, st := range statuses {
		if st.Objective == objective && st.Model == model {
			return st
		}
	}
	t.Fatalf("no status of %s on %s in %v", objective, model, statuses)
	return slo.Status{}
}

// sloSection is the page's section of one objective on one model.
func sloSection(t *testing.T, doc *html.Node, objective, model string) *html.Node {
	t.Helper()
	for _, s := range find(doc, "section", "slo") {
		if attr(s, "id") == sloAnchor(objective, model) {
			return s
		}
	}
	t.Fatalf("no section of %s on %s", objective, model)
	return nil
}

// firstText is the text of the first element with the tag and class
// under n, before any nested element's text.
func firstText(t *testing.T, n *html.Node, tag, class string) string {
	t.Helper()
	els := find(n, tag, class)
	if len(els) == 0 {
		t.Fatalf("no <%s class=%s>", tag, class)
	}
	return strings.TrimSpace(els[0].FirstChild.Data)
}

// TestSLOPageShowsTheRoundsStatus: each objective's SLI, objective,
// budget and burn rates are the round's status values, printed, not
// computed again; by hand they are 80% / 20x / -1900% on the burning
// model, 99.9% / 0.1x / 90% on the healthy one, and dashes without events.
func TestSLOPageShowsTheRoundsStatus(t *testing.T) {
	h, _, statuses := sloWorkspace(t, "")
	srv := newServer(t, h)
	doc := get(t, srv, "/slos", http.StatusOK)
	checkAccessibleSVGs(t, "/slos", doc)
	if got := len(find(doc, "section", "slo")); got != len(statuses) || got != 4 {
		t.Fatalf("%d objective sections, want the round's %d (4)", got, len(statuses))
	}

	hand := []struct {
		objective, model, state, sli, budget, rate string
	}{
		{"chat-ttft", burningModel, "critical", "80%", "-1900%", "20x"},
		{"chat-ttft", healthyModel, "ok", "99.9%", "90%", "0.1x"},
		{"chat-ttft", quietModel, "no data", "–", "–", "–"},
		{"chat-availability", burningModel, "ok", "100%", "100%", "0x"},
	}
	for _, c := range hand {
		st := statusOf(t, statuses, c.objective, c.model)
		sec := sloSection(t, doc, c.objective, c.model)
		if got := text(find(sec, "span", "badge")[0]); got != c.state {
			t.Errorf("%s on %s: state %q, want %q", c.objective, c.model, got, c.state)
		}
		sli, budget := firstText(t, sec, "dd", "sli"), firstText(t, sec, "dd", "budget")
		if sli != c.sli || budget != c.budget {
			t.Errorf("%s on %s: SLI %q budget %q, want %q %q by hand", c.objective, c.model, sli, budget, c.sli, c.budget)
		}
		// The same numbers as the status holds them.
		if st.HasSLI && sli != formatValue(st.SLI, "ratio") {
			t.Errorf("%s on %s: SLI %q, status %v", c.objective, c.model, sli, st.SLI)
		}
		if st.HasBudget && budget != formatValue(st.Budget, "ratio") {
			t.Errorf("%s on %s: budget %q, status %v", c.objective, c.model, budget, st.Budget)
		}
		if got := firstText(t, sec, "dd", "objective"); got != formatValue(st.Target, "ratio") {
			t.Errorf("%s on %s: objective %q, status %v", c.objective, c.model, got, st.Target)
		}
		// The memory holds 130 minutes of the 24-hour period.
		if got := text(find(sec, "dd", "budget")[0]); !strings.Contains(got, "over the 2 h 10 min the memory holds of the 1 d period") {
			t.Errorf("%s on %s: budget %q does not say how much of the period it is over", c.objective, c.model, got)
		}
		rows := find(find(sec, "table", "burn")[0], "tr", "")[1:]
		if len(rows) != len(st.Rules) {
			t.Fatalf("%s on %s: %d rule rows, status has %d", c.objective, c.model, len(rows), len(st.Rules))
		}
		for i, r := range st.Rules {
			long, short := text(find(rows[i], "td", "long-rate")[0]), text(find(rows[i], "td", "short-rate")[0])
			if long != burnRate(r.Long) || short != burnRate(r.Short) || long != c.rate || short != c.rate {
				t.Errorf("%s on %s rule %d: burn %q/%q, status %v/%v, by hand %q", c.objective, c.model, i, long, short, r.Long.Rate, r.Short.Rate, c.rate)
			}
		}
		// One plot per rule of the status's trend: its numbers table ends
		// with the rates the rule row shows, against the rule's rate.
		plots := find(sec, "figure", "plot")
		if c.state == "no data" {
			if len(plots) != 0 {
				t.Errorf("%s on %s: %d trend plots without events", c.objective, c.model, len(plots))
			}
			continue
		}
		if len(plots) != len(st.Rules) {
			t.Fatalf("%s on %s: %d trend plots, want one per rule (%d)", c.objective, c.model, len(plots), len(st.Rules))
		}
		for i, r := range st.Rules {
			rows := find(find(plots[i], "tbody", "")[0], "tr", "")
			if len(rows) != slo.TrendPoints {
				t.Fatalf("%s on %s rule %d: %d trend rows, want %d", c.objective, c.model, i, len(rows), slo.TrendPoints)
			}
			var cells []string
			for _, td := range find(rows[len(rows)-1], "td", "")[1:] {
				cells = append(cells, text(td))
			}
			want := []string{burnRate(r.Long), burnRate(r.Short), detect.FormatNumber(r.Rule.BurnRate) + "x"}
			if strings.Join(cells, " ") != strings.Join(want, " ") {
				t.Errorf("%s on %s rule %d: the trend ends at %q, the rule row says %q", c.objective, c.model, i, cells, want)
			}
		}
	}

	// The burning TTFT objective lists the incidents that spent it, most
	// recent first as the journal lists them; the availability one, whose
	// budget nothing spent, none.
	burned := find(sloSection(t, doc, "chat-ttft", burningModel), "ul", "burned-by")
	if len(burned) != 1 {
		t.Fatal("the burning objective lists no incident")
	}
	items := find(burned[0], "li", "")
	if len(items) != 2 {
		t.Fatalf("%d incidents spent the TTFT budget, want resolved-1 and drift-1", len(items))
	}
	var links, shares []string
	for _, li := range items {
		links = append(links, attr(find(li, "a", "")[0], "href"))
		shares = append(shares, text(find(li, "span", "consumed")[0]))
	}
	if strings.Join(links, " ") != "/incidents/resolved-1 /incidents/drift-1" || strings.Join(shares, " ") != "50% of the budget 1% of the budget" {
		t.Errorf("incidents that spent it: %v %v", links, shares)
	}
	// The headline is text, escaped.
	if got := text(find(items[1], "span", "headline")[0]); got != "<b>drift</b> burning" || len(find(items[1], "b", "")) != 0 {
		t.Errorf("headline %q rendered as markup", got)
	}
	if len(find(sloSection(t, doc, "chat-availability", burningModel), "ul", "burned-by")) != 0 {
		t.Error("an incident that spent none of the availability budget is listed as having burned it")
	}
	if len(find(sloSection(t, doc, "chat-ttft", healthyModel), "ul", "burned-by")) != 0 {
		t.Error("another model's incidents are listed under the healthy model")
	}
}

func TestSLOPageWithoutObjectives(t *testing.T) {
	srv, _, _ := workspace(t, 100)
	doc := get(t, srv, "/slos", http.StatusOK)
	if len(find(doc, "section", "slo")) != 0 || !strings.Contains(text(doc), "No objective has events yet") {
		t.Errorf("a round without SLOs: %q", text(byID(doc, "main")))
	}
	// Every page links to it.
	fleet := get(t, srv, "/", http.StatusOK)
	found := false
	for _, a := range find(fleet, "a", "") {
		found = found || attr(a, "href") == "/slos"
	}
	if !found {
		t.Error("the workspace's navigation does not link the SLO page")
	}
}

// TestIncidentPageShowsTheBudgetItSpent: the journal's slo_budgets, the
// spent ones with their share and link to the objective on the SLO page,
// the unspent named.
func TestIncidentPageShowsTheBudgetItSpent(t *testing.T) {
	h, _, _ := sloWorkspace(t, "")
	srv := newServer(t, h)
	doc := get(t, srv, "/incidents/resolved-1", http.StatusOK)
	tables := find(doc, "table", "slo-budgets")
	if len(tables) != 1 {
		t.Fatal("the incident page has no error budget table")
	}
	rows := find(tables[0], "tr", "")[1:]
	if len(rows) != 1 {
		t.Fatalf("%d budget rows, want the TTFT one (availability spent nothing)", len(rows))
	}
	// 650 bad events against 1300 allowed: 50%.
	if got := text(find(rows[0], "td", "consumed")[0]); got != "50%" {
		t.Errorf("budget consumed %q, want 50%%", got)
	}
	row := text(rows[0])
	for _, want := range []string{"chat-ttft", "TTFT ≤ 1s for 99%", "650 of 3250", "1 d", "(2 h 10 min of it on record)"} {
		if !strings.Contains(row, want) {
			t.Errorf("budget row %q lacks %q", row, want)
		}
	}
	if href := attr(find(rows[0], "a", "")[0], "href"); href != "/slos#slo-chat-ttft-Qwen%2FQwen3-8B" {
		t.Errorf("budget row links to %s", href)
	}
	if got := text(byID(doc, "main")); !strings.Contains(got, "No budget spent of: chat-availability.") {
		t.Error("the page does not name the objective the incident spent nothing of")
	}
	// An incident without SLO events has no such section.
	if len(find(get(t, srv, "/incidents/"+journalFor(simulatedFleet(t)).records[0].ID, http.StatusOK), "table", "slo-budgets")) != 0 {
		t.Error("an incident with no slo_budgets shows an error budget table")
	}
}

func newServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
