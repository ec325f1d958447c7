// Package ui is the on-call workspace: server-rendered HTML pages over
// what the evaluation loop decided, linked from every page the watchdog
// sends.
//
//	/                  the fleet: every replica's layer verdict, its numbers
//	                   from the round's snapshot and a sparkline; open
//	                   incidents first, a fleet incident with its replicas;
//	                   ?model= filters, ?page= pages through large fleets
//	/incidents/{id}    one incident from the journal: diagnosis, triage,
//	                   the signals that decided the finding plotted large
//	                   with baseline, threshold and onset/fire/resolve
//	                   marks, the rest folded, constants as facts; chain,
//	                   steps, timeline, deliveries
//	/replicas/{name}   one replica: its key series plotted, its findings
//	                   and incidents, its last scrape
//	/slos              every objective per model as the round's status
//	                   holds it: SLI, burn rate per window pair, budget
//	                   left, and the journal's incidents that spent it
//
// The plots are SVG drawn here, in Go, not by a chart library in the
// browser: the pages need no JavaScript (the Content-Security-Policy
// forbids scripts outright), nothing comes from npm, and the output is
// deterministic, so tests count the paths and lines a plot holds. Every
// plot carries a <title>, an aria-label and a table of the same numbers.
//
// The pages render; they decide nothing. Current numbers are the round's
// snapshot (internal/assess). A plot's points are assess.ReadSnapshot,
// the snapshot's own code, run over the replica's window once per step,
// with the window seen as it stood in that step (gauges read as their
// peak within the step). Incidents come from the journal
// (internal/incident) as the evaluation loop and the notifier recorded
// them.
package ui

import (
	"cmp"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

//go:embed templates/*.html static
var files embed.FS

// Alerts is what the pages read from the evaluation loop: the last
// round's assessment and the alert state after it.
type Alerts interface {
	Alerts() []alert.Incident
	Round() assess.Round
}

// Windows reads a replica's window (the window store).
type Windows interface {
	View(replica string, fn func(w detect.Window)) bool
}

// Options of the workspace.
type Options struct {
	Alerts  Alerts
	Windows Windows
	// Incidents is the journal; nil: incident pages answer 404 saying
	// there is no journal.
	Incidents incident.Reader
	// Span is how far back the plots reach, at most (default one hour;
	// less while the window holds less).
	Span time.Duration
	// MinStep is the shortest plot step: a few scrape intervals, so every
	// step's rates rest on more than one scrape (default one minute).
	MinStep time.Duration
	// ArrivalEndpoints as in assess.Config; "" takes the default.
	ArrivalEndpoints string
	// PageSize is how many replicas the fleet page lists per page
	// (default 100): a page's cost is bounded by it, not by the fleet.
	PageSize int
	// PathPrefix starts every link, form action and stylesheet URL the
	// pages hold: the path a browser sees the daemon under
	// (config.Prefixes.Links, "/watchdog" behind an Ingress path; "" at
	// the root). The routes themselves are unprefixed: the server strips
	// its route prefix before the workspace sees a request.
	PathPrefix string
}

// steps is the number of points of a plot.
const steps = 60

// Handler serves the workspace pages.
type Handler struct {
	opts  Options
	mux   *http.ServeMux
	pages map[string]*template.Template

	// sparks caches the fleet page's sparklines for one round: every
	// visitor of a round shares them, so a refreshing browser does not
	// recompute a large fleet's.
	mu       sync.Mutex
	sparksAt time.Time
	sparks   map[string]sparkline
}

// New parses the templates; it starts nothing.
func New(opts Options) (*Handler, error) {
	if opts.Span <= 0 {
		opts.Span = time.Hour
	}
	if opts.MinStep <= 0 {
		opts.MinStep = time.Minute
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 100
	}
	if opts.ArrivalEndpoints == "" {
		opts.ArrivalEndpoints = detect.DefaultInferenceEndpoints
	}
	h := &Handler{opts: opts, pages: map[string]*template.Template{}}
	funcs := template.FuncMap{"value": formatValue, "opt": optValue, "ttft": ttftValue, "time": formatTime, "severityClass": severityClass,
		"clock": formatClock, "facts": newFactList, "path": h.path}
	for _, page := range []string{"fleet", "incident", "replica", "slos", "notfound"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/plot.html", "templates/"+page+".html")
		if err != nil {
			return nil, err
		}
		h.pages[page] = t
	}
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET /{$}", h.fleet)
	h.mux.HandleFunc("GET /incidents/{id}", h.incident)
	h.mux.HandleFunc("GET /replicas/{name}", h.replica)
	h.mux.HandleFunc("GET /slos", h.slos)
	static, _ := fs.Sub(files, "static")
	h.mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	return h, nil
}

// Patterns are the routes the handler serves, for the server to mount.
func (h *Handler) Patterns() []string {
	return []string{"GET /{$}", "GET /incidents/{id}", "GET /replicas/{name}", "GET /slos", "GET /ui/"}
}

// contentSecurityPolicy allows the page's own stylesheet and nothing
// else: no scripts at all, no inline styles, no framing.
const contentSecurityPolicy = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) render(w http.ResponseWriter, status int, page string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	// A failure here is a broken connection or a template bug the tests
	// catch; the status line is already out.
	h.pages[page].Execute(w, data)
}

type notFound struct {
	Title, Message string
}

func (h *Handler) notFound(w http.ResponseWriter, title, msg string) {
	h.render(w, http.StatusNotFound, "notfound", notFound{Title: title, Message: msg})
}

// span is the plots' extent for a window: Span, or less while the window
// holds less, and the step that gives it steps points.
func (h *Handler) span(w detect.Window, end time.Time) (time.Duration, time.Duration) {
	span := h.opts.Span
	if first := w.Scrape().FirstSeen; !first.IsZero() && end.Sub(first) < span {
		span = end.Sub(first)
	}
	step := max(span/steps, h.opts.MinStep)
	return (span / step) * step, step
}

// path is the link to a daemon path ("/incidents/x") as a browser
// reaches it, under the path prefix.
func (h *Handler) path(p string) string { return h.opts.PathPrefix + p }

// incidentLink is where an alert's incident page is.
func (h *Handler) incidentLink(a alert.Incident) string {
	id := a.ID
	if id == "" {
		id = alert.IncidentID(a.Fingerprint, a.ActiveAt)
	}
	return h.path(alert.IncidentPath(id))
}

// runbookLink is an incident's runbook link as a browser follows it. Until
// its first notification a record holds the finding's daemon path
// ("/runbooks/<class>"), which gets the path prefix; after it, the
// notification's link, absolute or already under the route prefix, kept.
func (h *Handler) runbookLink(u string) string {
	if strings.HasPrefix(u, "/runbooks/") {
		return h.path(u)
	}
	return u
}

func (h *Handler) replicaLink(name string) string { return h.path("/replicas/" + url.PathEscape(name)) }

// incidentRow is one open incident on the fleet page.
type incidentRow struct {
	Link, State, Severity, Class, Headline, Replica, Model string
	Fleet                                                  bool
	Replicas                                               []string
	SilencedBy                                             []string
	Since                                                  time.Time
}

// replicaRow is one replica on the fleet page.
type replicaRow struct {
	Name, Link, Model, Verdict, Layer, State string
	Snapshot                                 assess.Snapshot
	Up                                       bool
	Spark                                    sparkline
}

type fleetPage struct {
	At               time.Time
	Models           []string
	Model            string
	Incidents        []incidentRow
	Replicas         []replicaRow
	Total            int
	Page, Pages      int
	PrevURL, NextURL string
	Recent           []incident.Record
}

// stateRank orders firing before pending before the rest.
func stateRank(s string) int {
	switch s {
	case string(alert.StateFiring):
		return 0
	case string(alert.StatePending):
		return 1
	}
	return 2
}

// alertReplicas are the replicas an alert covers.
func alertReplicas(a alert.Incident) []string {
	if len(a.Finding.AffectedReplicas) > 0 {
		return a.Finding.AffectedReplicas
	}
	return []string{a.Replica}
}

func (h *Handler) fleet(w http.ResponseWriter, r *http.Request) {
	round := h.opts.Alerts.Round()
	model := r.URL.Query().Get("model")
	p := fleetPage{At: round.At, Model: model}

	// Open incidents: the alerts that page, not the ones folded into
	// another, firing first.
	replicaState := map[string]string{}
	for _, a := range h.opts.Alerts.Alerts() {
		if a.State != alert.StateFiring && a.State != alert.StatePending {
			continue
		}
		if model != "" && a.Model != model {
			continue
		}
		for _, name := range alertReplicas(a) {
			if cur, ok := replicaState[name]; !ok || stateRank(string(a.State)) < stateRank(cur) {
				replicaState[name] = string(a.State)
			}
		}
		if a.AbsorbedBy != "" {
			continue
		}
		p.Incidents = append(p.Incidents, incidentRow{Link: h.incidentLink(a), State: string(a.State), Severity: a.Severity.String(),
			Class: string(a.Class), Headline: a.Finding.Summary, Replica: a.Replica, Model: a.Model, Fleet: a.Fleet,
			Replicas: alertReplicas(a), SilencedBy: a.SilencedBy, Since: a.ActiveAt})
	}
	slices.SortStableFunc(p.Incidents, func(x, y incidentRow) int {
		return cmp.Or(cmp.Compare(stateRank(x.State), stateRank(y.State)), x.Since.Compare(y.Since))
	})

	models := map[string]bool{}
	var reps []assess.Replica
	for _, rep := range round.Replicas {
		if rep.Replica.Model != "" {
			models[rep.Replica.Model] = true
		}
		if model == "" || rep.Replica.Model == model {
			reps = append(reps, rep)
		}
	}
	p.Models = slices.Sorted(func(yield func(string) bool) {
		for m := range models {
			if !yield(m) {
				return
			}
		}
	})
	slices.SortStableFunc(reps, func(x, y assess.Replica) int {
		return cmp.Compare(stateRank(replicaState[x.Replica.Name]), stateRank(replicaState[y.Replica.Name]))
	})

	p.Total = len(reps)
	p.Pages = max(1, (len(reps)+h.opts.PageSize-1)/h.opts.PageSize)
	p.Page = 1
	if n, err := strconv.Atoi(r.URL.Query().Get("page")); err == nil && n >= 1 && n <= p.Pages {
		p.Page = n
	}
	lo := (p.Page - 1) * h.opts.PageSize
	reps = reps[lo:min(len(reps), lo+h.opts.PageSize)]
	pageURL := func(n int) string {
		q := url.Values{}
		if model != "" {
			q.Set("model", model)
		}
		q.Set("page", strconv.Itoa(n))
		return h.path("/?" + q.Encode())
	}
	if p.Page > 1 {
		p.PrevURL = pageURL(p.Page - 1)
	}
	if p.Page < p.Pages {
		p.NextURL = pageURL(p.Page + 1)
	}

	for _, rep := range reps {
		name := rep.Replica.Name
		p.Replicas = append(p.Replicas, replicaRow{Name: name, Link: h.replicaLink(name), Model: rep.Replica.Model,
			Verdict: rep.Triage.Label(), Layer: string(rep.Triage.Layer), State: replicaState[name], Snapshot: rep.Snapshot,
			Up: rep.Scrape.Up, Spark: h.sparkline(round.At, name)})
	}
	if h.opts.Incidents != nil {
		for _, rec := range h.opts.Incidents.Incidents() {
			if len(p.Recent) == 10 {
				break
			}
			if model == "" || rec.Model == model {
				p.Recent = append(p.Recent, rec)
			}
		}
	}
	h.render(w, http.StatusOK, "fleet", p)
}

// sparkline is the replica's queued requests over the plot span, computed
// once per round.
func (h *Handler) sparkline(at time.Time, name string) sparkline {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.sparksAt.Equal(at) {
		h.sparksAt, h.sparks = at, map[string]sparkline{}
	}
	if s, ok := h.sparks[name]; ok {
		return s
	}
	var s sparkline
	h.opts.Windows.View(name, func(win detect.Window) {
		span, step := h.span(win, at)
		hist := history(win, at, span, step, h.opts.ArrivalEndpoints)
		s = newSparkline("Queued requests", points(hist, func(s assess.Snapshot) *float64 { return s.QueuedRequests }), at.Add(-span), at)
	})
	h.sparks[name] = s
	return s
}

// incidentPage is one journal record laid out.
type incidentPage struct {
	incident.Record
	EvidenceView   evidence
	ImpactView     evidence
	SilenceURL     string
	PostmortemURL  string
	RunbookURL     string
	ReplicaLinks   []link
	DeliveriesOK   int
	DeliveriesFail int
	// SLOSpent are the objectives the incident spent error budget of;
	// SLOUnspent those whose events it covered without spending any.
	SLOSpent   []budgetRow
	SLOUnspent []string
}

type link struct{ Name, URL string }

func (h *Handler) incident(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if h.opts.Incidents == nil {
		h.notFound(w, "No incident journal", "This watchdog keeps no incident journal, so incident "+id+" cannot be shown.")
		return
	}
	rec, ok := h.opts.Incidents.Incident(id)
	if !ok {
		h.notFound(w, "Incident not found", "No incident "+id+" in the journal: it may be older than the journal's retention.")
		return
	}
	p := incidentPage{Record: rec}
	from, to := rec.OpenedAt, rec.ResolvedAt
	for _, s := range slices.Concat(rec.Signals, rec.Impact) {
		for _, pt := range s.Points {
			if from.IsZero() || pt.At.Before(from) {
				from = pt.At
			}
			if pt.At.After(to) {
				to = pt.At
			}
		}
	}
	markers := []marker{{"onset", rec.OpenedAt}, {"fired", rec.FiredAt}, {"resolved", rec.ResolvedAt}}
	p.EvidenceView = layoutEvidence(rec.Signals, true, from, to, markers)
	p.ImpactView = layoutEvidence(rec.Impact, false, from, to, markers)
	// The silence is of this incident: its ID holds while it escalates or
	// is renamed after a newly found cause, and ends with it. Class and
	// severity are left for on-call to add; either would let the page
	// through on a rename or an escalation.
	q := url.Values{}
	q.Set("incident", rec.ID)
	q.Set("replica", rec.Replica)
	if rec.Model != "" {
		q.Set("model", rec.Model)
	}
	p.SilenceURL = h.path("/silences/new?" + q.Encode())
	if !rec.Open() {
		p.PostmortemURL = h.path(alert.PostmortemPath(rec.ID))
	}
	p.RunbookURL = h.runbookLink(rec.Runbook)
	for _, name := range rec.Replicas {
		p.ReplicaLinks = append(p.ReplicaLinks, link{Name: name, URL: h.replicaLink(name)})
	}
	p.SLOSpent, p.SLOUnspent = h.incidentBudgets(rec)
	for _, d := range rec.Deliveries {
		if d.OK {
			p.DeliveriesOK++
		} else {
			p.DeliveriesFail++
		}
	}
	h.render(w, http.StatusOK, "incident", p)
}

// replicaPage is one replica laid out.
type replicaPage struct {
	At        time.Time
	Replica   assess.Replica
	Verdict   string
	Plots     []renderedPlot
	Incidents []incident.Record
	Alerts    []incidentRow
}

func (h *Handler) replica(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	round := h.opts.Alerts.Round()
	rep, ok := round.Replica(name)
	if !ok {
		h.notFound(w, "Replica not found", "No replica "+name+" in the last evaluation round.")
		return
	}
	p := replicaPage{At: round.At, Replica: rep, Verdict: rep.Triage.String()}
	h.opts.Windows.View(name, func(win detect.Window) {
		span, step := h.span(win, round.At)
		hist := history(win, round.At, span, step, h.opts.ArrivalEndpoints)
		for _, k := range keySeries {
			p.Plots = append(p.Plots, plotSpec{Title: k.Title, Unit: k.Unit, From: round.At.Add(-span), To: round.At,
				Lines: []line{{Name: k.Title, Class: "series", Points: points(hist, k.Value)}}}.layout())
		}
	})
	for _, a := range h.opts.Alerts.Alerts() {
		if (a.State == alert.StateFiring || a.State == alert.StatePending) && slices.Contains(alertReplicas(a), name) {
			p.Alerts = append(p.Alerts, incidentRow{Link: h.incidentLink(a), State: string(a.State), Severity: a.Severity.String(),
				Class: string(a.Class), Headline: a.Finding.Summary, SilencedBy: a.SilencedBy, Since: a.ActiveAt})
		}
	}
	if h.opts.Incidents != nil {
		for _, rec := range h.opts.Incidents.Incidents() {
			if rec.Replica == name || slices.Contains(rec.Replicas, name) {
				p.Incidents = append(p.Incidents, rec)
			}
		}
	}
	h.render(w, http.StatusOK, "replica", p)
}

// optValue prints a snapshot field, a dash when it is unknown.
func optValue(v *float64, unit string) string {
	if v == nil {
		return "–"
	}
	return formatValue(*v, unit)
}

// ttftValue is a snapshot's TTFT p99, or, where no queued request got its
// first token, that (the pages' headline says the same).
func ttftValue(s assess.Snapshot) string {
	if span, ok := s.NoFirstTokenFor(); ok && s.TTFTP99 == nil {
		return "no first token in " + detect.ShortDuration(span.Round(time.Second))
	}
	return optValue(s.TTFTP99, "s")
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func formatClock(t time.Time) string { return t.UTC().Format("15:04:05") }

// severityClass is the CSS class of a severity or state badge.
func severityClass(s string) string {
	switch s {
	case "critical", "firing":
		return "bad"
	case "warning", "pending":
		return "warn"
	case "resolved", "ok":
		return "good"
	}
	return "info"
}
