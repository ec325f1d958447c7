// Package diagnose is the one-shot triage behind `watchdog diagnose`: for
// an engineer at a terminal, it scrapes each target a few times an
// interval apart into a private window, optionally probes
// /health_generate, runs the daemon's detectors once at the last scrape
// (ranges shortened to the observation, see OneShotConfig), and reports
// per replica the global state the runbook reads first, the layer verdict,
// and any finding with its evidence and next steps.
//
// It reuses the daemon's pipeline pieces (scrape, window, detect) and sits
// where main does: at the end of the chain, reading from all of them.
package diagnose

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ErrIncident is wrapped by Report.Err when the observation found a
// warning or critical finding, a target down, a failed /health_generate
// probe or a replica making no progress. The command maps it to its own
// exit status, distinct from usage and runtime errors.
var ErrIncident = errors.New("incident found")

// Defaults of Options.
const (
	DefaultInterval = 10 * time.Second
	DefaultSamples  = 2
	// maxScrapeTimeout caps the default per-scrape timeout.
	maxScrapeTimeout = 10 * time.Second
)

// Options tune a diagnosis. Zero values take the defaults.
type Options struct {
	Interval time.Duration // between scrapes of a target; default 10s
	Samples  int           // scrapes per target; default 2
	// Timeout bounds one scrape; default 80% of Interval, at most 10s.
	Timeout time.Duration
	// HealthProbe GETs each target's /health_generate once during the
	// observation (SGLang generates one token: the best hang probe).
	HealthProbe bool
	// HealthTimeout bounds the probe; default scrape.DefaultHealthProbeTimeout
	// (25s, above SGLang's own 20s). A hung engine makes the command wait
	// this long.
	HealthTimeout time.Duration
	// Detectors are the daemon's detector settings to adapt; nil:
	// detect.DefaultConfig().
	Detectors *detect.Config
	// RunbookBase makes runbook links absolute (the daemon's external
	// URL); "" leaves them daemon-relative (/runbooks/<class>).
	RunbookBase string
	// Runbooks overrides the runbook link per class (a team's own wiki),
	// as the daemon's runbooks setting does.
	Runbooks map[string]string
	// Client performs the requests; nil: a dedicated client.
	Client *http.Client
}

// Validate reports invalid options (after defaults are applied).
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}

func (o Options) withDefaults() (Options, error) {
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Samples == 0 {
		o.Samples = DefaultSamples
	}
	if o.Timeout == 0 {
		o.Timeout = min(maxScrapeTimeout, o.Interval*8/10)
	}
	if o.HealthTimeout == 0 {
		o.HealthTimeout = scrape.DefaultHealthProbeTimeout
	}
	var errs []error
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval %s must be positive", o.Interval))
	}
	if o.Samples < 1 {
		errs = append(errs, fmt.Errorf("samples %d must be at least 1", o.Samples))
	}
	if o.Timeout <= 0 || (o.Samples > 1 && o.Timeout >= o.Interval) {
		errs = append(errs, fmt.Errorf("scrape timeout %s must be positive and shorter than the interval %s", o.Timeout, o.Interval))
	}
	if o.HealthTimeout < 0 {
		errs = append(errs, fmt.Errorf("health probe timeout %s must be positive", o.HealthTimeout))
	}
	return o, errors.Join(errs...)
}

// Report is the outcome of one diagnosis, the JSON document of
// `--output json`.
type Report struct {
	At       time.Time `json:"at"` // the last scrape
	Interval float64   `json:"interval_seconds"`
	Samples  int       `json:"samples"`
	Span     float64   `json:"span_seconds"` // first to last scrape
	Incident bool      `json:"incident"`
	// UnderPressure names the replicas without an incident whose layer
	// triage shows load pressure (requests waiting, or latency high): a
	// one-shot cannot judge the detectors that would page on it.
	UnderPressure []string `json:"under_pressure,omitempty"`
	Summary       string   `json:"summary"`
	// Targets holds one entry per replica: a target usually is one
	// replica; a gateway's /engine_metrics has one per worker.
	Targets []TargetReport `json:"targets"`
	// Detectors says which classes the one-shot could judge.
	Detectors []DetectorNote `json:"detectors"`
}

// TargetReport is one replica's diagnosis.
type TargetReport struct {
	Name       string        `json:"name"`   // replica name
	Target     string        `json:"target"` // target name
	URL        string        `json:"url"`    // without credentials or query
	Kind       string        `json:"kind"`   // engine or gateway (by its exposition)
	Model      string        `json:"model,omitempty"`
	EngineType string        `json:"engine_type,omitempty"`
	Up         bool          `json:"up"` // the last scrape succeeded
	Scrapes    int           `json:"scrapes"`
	Failed     int           `json:"failed_scrapes"`
	Errors     []ScrapeError `json:"errors,omitempty"`
	Health     *HealthResult `json:"health_generate,omitempty"`
	// State and Layer are the assessment's snapshot and layer triage of
	// the replica, the same the daemon computes (internal/assess).
	State    assess.Snapshot `json:"state"`
	Layer    Layer           `json:"layer"`
	Findings []FindingEntry  `json:"findings"`
}

// ScrapeError is one failed scrape.
type ScrapeError struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"` // refused, timeout, http_status, parse_error, too_large, too_many_series, error
	Error  string    `json:"error"`
	Hint   string    `json:"hint,omitempty"`
}

// HealthResult is the /health_generate probe.
type HealthResult struct {
	Up        bool    `json:"up"`
	Supported bool    `json:"supported"` // false: the target has no such endpoint
	Status    int     `json:"status,omitempty"`
	Duration  float64 `json:"duration_seconds"`
	Reason    string  `json:"reason,omitempty"`
	Error     string  `json:"error,omitempty"`
}

// Failed reports whether the probe says the engine is not serving.
func (h *HealthResult) Failed() bool { return h != nil && h.Supported && !h.Up }

// FindingEntry is a detector finding made printable: severity as text,
// non-finite numbers as null, links resolved.
type FindingEntry struct {
	Class       detect.Class    `json:"class"`
	Severity    string          `json:"severity"`
	Layer       detect.Layer    `json:"layer"`
	Summary     string          `json:"summary"`
	Diagnosis   string          `json:"diagnosis"`
	Evidence    []EvidenceEntry `json:"evidence"`
	Emergency   []string        `json:"emergency_steps"`
	RootCause   []string        `json:"root_cause_steps"`
	Runbook     string          `json:"runbook"`
	ExplainedBy []detect.Class  `json:"explained_by,omitempty"` // other findings here that cause this one
	severity    detect.Severity
}

// EvidenceEntry is one number a finding rests on.
type EvidenceEntry struct {
	Name      string   `json:"name"`
	Value     *float64 `json:"value"`
	Baseline  *float64 `json:"baseline,omitempty"`
	Unit      string   `json:"unit,omitempty"`
	Threshold string   `json:"threshold,omitempty"`
}

// Err returns nil when the report is clean, else an error wrapping
// ErrIncident that says why.
func (r *Report) Err() error {
	if !r.Incident {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrIncident, r.Summary)
}

// Run observes the targets and diagnoses them. It returns an error only
// for invalid options or when ctx ends first; incidents are in the report
// (Report.Err).
func Run(ctx context.Context, targets []scrape.Target, opts Options) (*Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return nil, errors.New("no targets")
	}
	base := detect.DefaultConfig()
	if opts.Detectors != nil {
		base = *opts.Detectors
	}
	// Validate the daemon settings before spending the observation time.
	if _, _, err := OneShotConfig(base, opts.Interval, opts.Samples); err != nil {
		return nil, err
	}
	obs, err := Observe(ctx, targets, opts)
	if err != nil {
		return nil, err
	}
	return Diagnose(obs, base, opts)
}

// Observation is what was collected from the targets.
type Observation struct {
	Interval time.Duration
	Samples  int
	Targets  []TargetObservation
}

// TargetObservation is one target's scrapes, oldest first, and its probe.
type TargetObservation struct {
	Target  scrape.Target
	Scrapes []series.Scrape
	Health  *scrape.HealthProbe
}

// Observe scrapes every target opts.Samples times, opts.Interval apart
// (all targets of a round concurrently), and probes /health_generate
// alongside when asked. The wait between rounds is the command's real
// behaviour: a ticker, cut short by ctx.
func Observe(ctx context.Context, targets []scrape.Target, opts Options) (Observation, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Observation{}, err
	}
	client := opts.Client
	if client == nil {
		client = scrape.NewClient(nil)
		defer client.CloseIdleConnections()
	}
	obs := Observation{Interval: opts.Interval, Samples: opts.Samples, Targets: make([]TargetObservation, len(targets))}
	for i, t := range targets {
		obs.Targets[i].Target = t
	}

	var probes sync.WaitGroup
	if opts.HealthProbe {
		for i := range obs.Targets {
			to := &obs.Targets[i]
			probes.Go(func() {
				p := scrape.ProbeHealth(ctx, client, to.Target, opts.HealthTimeout)
				to.Health = &p
			})
		}
	}
	// The probes must finish before obs is read, also on cancellation
	// (they are bound to ctx).
	defer probes.Wait()

	scrapeOpts := scrape.Options{Interval: opts.Interval, Timeout: opts.Timeout}
	if opts.Samples == 1 {
		scrapeOpts.Interval = opts.Timeout + time.Second // no second scrape to collide with
	}
	tick := time.NewTicker(opts.Interval)
	defer tick.Stop()
	for round := range opts.Samples {
		if round > 0 {
			select {
			case <-ctx.Done():
				return Observation{}, ctx.Err()
			case <-tick.C:
			}
		}
		var wg sync.WaitGroup
		for i := range obs.Targets {
			to := &obs.Targets[i]
			wg.Go(func() {
				to.Scrapes = append(to.Scrapes, scrape.ScrapeOnce(ctx, client, to.Target, scrapeOpts))
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			return Observation{}, ctx.Err()
		}
	}
	probes.Wait()
	if ctx.Err() != nil {
		return Observation{}, ctx.Err()
	}
	return obs, nil
}

// Diagnose loads the observation into a private window and judges it
// with base's detectors adapted to the observation.
func Diagnose(obs Observation, base detect.Config, opts Options) (*Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var first, last time.Time
	for _, to := range obs.Targets {
		for _, sc := range to.Scrapes {
			if first.IsZero() || sc.At.Before(first) {
				first = sc.At
			}
			if sc.At.After(last) {
				last = sc.At
			}
		}
	}
	span := last.Sub(first)
	// Half an interval more, so the first scrape is inside (from, to].
	lookback := span + obs.Interval/2
	cfg, notes, err := OneShotConfig(base, lookback, obs.Samples)
	if err != nil {
		return nil, err
	}
	detectors, err := detect.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("detectors: %w", err)
	}
	assessor := assess.New(detectors, assess.Config{Triage: cfg.Triage, Correlation: correlate.DefaultConfig(),
		ArrivalEndpoints: detect.Get[detect.RetryAvalancheConfig](cfg).ArrivalEndpoints})

	store, err := window.New(window.Options{
		Retention:          cfg.MaxLookback() + lookback,
		ScrapeInterval:     obs.Interval,
		MaxPointsPerSeries: obs.Samples + 2,
	}, nil)
	if err != nil {
		return nil, err
	}
	appendErrs := map[string][]ScrapeError{}
	for _, to := range obs.Targets {
		for _, sc := range withHealth(to.Scrapes, to.Health) {
			if err := store.Append(sc); err != nil {
				appendErrs[to.Target.Name] = append(appendErrs[to.Target.Name],
					ScrapeError{At: sc.At, Reason: "window", Error: err.Error()})
			}
		}
	}

	rep := &Report{
		At: last, Interval: obs.Interval.Seconds(), Samples: obs.Samples, Span: span.Seconds(),
		Detectors: notes,
	}
	replicas := store.Replicas()
	for _, to := range obs.Targets {
		now := last
		if n := len(to.Scrapes); n > 0 {
			now = to.Scrapes[n-1].At
		}
		base := TargetReport{
			Target: to.Target.Name, URL: redact.URL(to.Target.URL), Kind: to.Target.Kind,
			Scrapes: len(to.Scrapes), Health: healthResult(to.Health),
		}
		var firstOK, lastOK time.Time
		for _, sc := range to.Scrapes {
			if sc.Reason == "" {
				if firstOK.IsZero() {
					firstOK = sc.At
				}
				lastOK = sc.At
			}
			if sc.Reason != "" {
				base.Failed++
				base.Errors = append(base.Errors, ScrapeError{At: sc.At, Reason: string(sc.Reason), Error: sc.Error, Hint: hint(sc.Reason, sc.Status)})
			}
		}
		base.Errors = append(base.Errors, appendErrs[to.Target.Name]...)
		for _, r := range replicas {
			if r.Target != to.Target.Name {
				continue
			}
			tr := base
			tr.Name, tr.Model, tr.EngineType = r.Name, r.Model, r.EngineType
			store.View(r.Name, func(w detect.Window) {
				analyzeReplica(&tr, w, assessor, now, lastOK.Sub(firstOK), opts)
			})
			rep.Targets = append(rep.Targets, tr)
		}
	}
	for i := range rep.Targets {
		for j := range rep.Targets[i].Findings {
			f := &rep.Targets[i].Findings[j]
			if u, ok := opts.Runbooks[string(f.Class)]; ok {
				f.Runbook = u
			} else {
				f.Runbook = runbookLink(opts.RunbookBase, f.Runbook)
			}
		}
	}
	rep.summarize()
	return rep, nil
}

// withHealth returns the scrapes with the probe's samples added, as the
// daemon does, to a successful scrape: here the last one. The input is
// left untouched.
func withHealth(scrapes []series.Scrape, p *scrape.HealthProbe) []series.Scrape {
	if p == nil {
		return scrapes
	}
	out := slices.Clone(scrapes)
	for j := len(out) - 1; j >= 0; j-- {
		if out[j].Reason == "" {
			out[j].Groups = slices.Clone(out[j].Groups)
			scrape.AddHealthSamples(&out[j], *p)
			break
		}
	}
	return out
}

// Layer is the replica's layer triage as the daemon computes it, or
// "down" when the last scrape failed.
type Layer struct {
	detect.TriageResult
	Down bool `json:"down,omitempty"`
	// Unreachable: the last scrape found nothing answering (refused,
	// timeout, DNS, a failed pod), as opposed to a server that answers
	// without usable metrics (404, a login page).
	Unreachable bool   `json:"unreachable,omitempty"`
	Label       string `json:"label"`
	Runbook     string `json:"runbook"`
}

// analyzeReplica fills the state, layer and findings of one replica from
// the assessment of its window.
func analyzeReplica(tr *TargetReport, w detect.Window, assessor *assess.Assessor, now time.Time, observed time.Duration, opts Options) {
	round := assessor.AssessWindow(w, now)
	st := round.Replicas[0]
	tr.Up = st.Scrape.Up
	if w.Has(series.GatewayHTTPRequestsTotal) || w.Has(assess.GatewayInFlight) {
		tr.Kind = scrape.KindGateway
	}
	if !st.Scrape.LastSuccess.IsZero() {
		tr.State = st.Snapshot
		tr.State.ObservedSeconds = observed.Seconds()
	}
	tr.Layer = Layer{TriageResult: st.Triage, Label: st.Triage.Label(), Runbook: "/runbooks/triage"}
	if !st.Scrape.Up {
		tr.Layer = Layer{Down: true, Unreachable: st.Scrape.Reason.Unreachable(), Label: "down", Runbook: "/runbooks/replica_down",
			TriageResult: detect.TriageResult{Reason: fmt.Sprintf("the last scrape failed (%s)", st.Scrape.Reason),
				NextStep: "see the scrape errors above"}}
		if !tr.Layer.Unreachable {
			tr.Layer.Label, tr.Layer.Runbook = "blind (the server answers, without usable metrics)", "/runbooks/metrics_blind"
		}
	}
	tr.Layer.Runbook = runbookLink(opts.RunbookBase, tr.Layer.Runbook)

	explainedBy := map[detect.Class][]detect.Class{}
	for _, inc := range round.Groups {
		for _, m := range inc.Members[1:] {
			explainedBy[m.Class] = append(explainedBy[m.Class], inc.Cause())
		}
	}
	found := slices.Clone(st.Findings)
	sort.SliceStable(found, func(i, j int) bool { return found[i].Severity > found[j].Severity })
	tr.Findings = make([]FindingEntry, 0, len(found))
	for _, f := range found {
		e := findingEntry(f)
		e.ExplainedBy = explainedBy[f.Class]
		tr.Findings = append(tr.Findings, e)
	}
}

func findingEntry(f detect.Finding) FindingEntry {
	e := FindingEntry{
		Class: f.Class, Severity: f.Severity.String(), Layer: f.Layer, Summary: f.Summary,
		Diagnosis: f.Diagnosis, Emergency: f.Emergency, RootCause: f.RootCause, Runbook: f.Runbook,
		severity: f.Severity,
	}
	for _, ev := range f.Evidence {
		ee := EvidenceEntry{Name: ev.Name, Value: finitePtr(ev.Value), Unit: ev.Unit, Threshold: ev.Threshold}
		if ev.HasBaseline {
			ee.Baseline = finitePtr(ev.Baseline)
		}
		e.Evidence = append(e.Evidence, ee)
	}
	return e
}

func healthResult(p *scrape.HealthProbe) *HealthResult {
	if p == nil {
		return nil
	}
	return &HealthResult{Up: p.Up, Supported: p.Supported(), Status: p.Status,
		Duration: p.Duration.Seconds(), Reason: string(p.Reason), Error: p.Error}
}

// hint adds what a failure reason usually means on an SGLang server.
func hint(reason series.ScrapeFailure, status int) string {
	switch reason {
	case series.FailureRefused:
		return "nothing answers there: the server process is down or restarting, or the port is wrong (SGLang's default is 30000)"
	case series.FailureTimeout:
		return "the server accepted the connection but did not answer in time: hung or badly overloaded; /health_generate tells which"
	case series.FailureDNS:
		return "the host name does not resolve: the pod or Service is gone, or the name is wrong"
	case series.FailureHTTPStatus:
		if status == http.StatusNotFound {
			return "/metrics answers 404: start the server with --enable-metrics (metrics are off by default), or fix the port/path"
		}
		return "the server or a proxy in front of it answers with an error; curl /metrics on the pod directly"
	case series.FailureNotMetrics:
		return "an HTML page answers instead of metrics: a login or proxy page in front of the server; scrape the pod directly"
	case series.FailureParse:
		return "the answer is not Prometheus text or is truncated: wrong port or path, or a proxy cutting the body"
	case series.FailureRedirect:
		return "the endpoint redirects to another host (not followed): a login or proxy in front of the server"
	case series.FailureTooLarge, series.FailureTooManySeries:
		return "the exposition exceeds the scrape limits: label fan-out (per-rank export, custom labels)"
	}
	return ""
}

func runbookLink(base, path string) string {
	if base == "" || !strings.HasPrefix(path, "/") {
		return path
	}
	return strings.TrimSuffix(base, "/") + path
}

// summarize sets Incident and Summary.
func (r *Report) summarize() {
	var crit, warn, down, blind, health, stuck int
	for _, t := range r.Targets {
		for _, f := range t.Findings {
			switch {
			case f.severity >= detect.Critical:
				crit++
			case f.severity >= detect.Warning:
				warn++
			}
		}
		switch {
		case t.Up:
		case t.Layer.Unreachable:
			down++
		default:
			blind++
		}
		if t.Health.Failed() {
			health++
		}
		if t.Layer.Verdict == detect.TriageStuck {
			stuck++
		}
		switch t.Layer.Verdict {
		case detect.TriageAdmission, detect.TriageSaturated, detect.TriageExecution:
			r.UnderPressure = append(r.UnderPressure, t.Name+": "+t.Layer.Label)
		}
	}
	r.Incident = crit+warn+down+blind+health+stuck > 0
	if !r.Incident {
		r.Summary = fmt.Sprintf("no incident on %d replica(s)", len(r.Targets))
		if len(r.UnderPressure) > 0 {
			// "OK" beside a full queue would be read as "nothing wrong";
			// what is not known is whether it is worse than usual.
			r.Summary = fmt.Sprintf("no incident found on %d replica(s), but %d under load pressure — %s. Whether that is worse than usual needs the history the daemon keeps",
				len(r.Targets), len(r.UnderPressure), strings.Join(r.UnderPressure, "; "))
		}
		return
	}
	r.UnderPressure = nil
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(crit, "critical finding(s)")
	add(warn, "warning finding(s)")
	add(down, "replica(s) down")
	add(blind, "replica(s) answering without usable metrics")
	add(health, "failed /health_generate probe(s)")
	add(stuck, "replica(s) making no progress")
	r.Summary = strings.Join(parts, ", ")
}
