// Package detect holds the watchdog's incident detectors and the types they
// exchange. A detector is pure: it reads a Window (a read-only view of one
// replica's recent samples) at a time now and returns findings. It does no
// I/O, keeps no state between calls, never logs and never reads the clock,
// so the same window and now always give the same findings.
package detect

import (
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Class names an incident class. It is stable: it appears in fingerprints,
// runbook URLs, metric labels and pages.
type Class string

// Severity of a finding.
type Severity int

// Severities, ordered.
const (
	Info Severity = iota
	Warning
	Critical
)

func (s Severity) String() string {
	switch s {
	case Critical:
		return "critical"
	case Warning:
		return "warning"
	default:
		return "info"
	}
}

// ParseSeverity is the inverse of Severity.String.
func ParseSeverity(s string) (Severity, bool) {
	switch s {
	case "critical":
		return Critical, true
	case "warning":
		return Warning, true
	case "info":
		return Info, true
	}
	return Info, false
}

// Layer is where in the serving path the trouble sits, following the
// runbook's triage order.
type Layer string

// Layers.
const (
	LayerQueue     Layer = "queue"       // requests wait for admission
	LayerPrefill   Layer = "prefill"     // prompt processing itself is slow
	LayerDecode    Layer = "decode"      // token generation is slow
	LayerMemory    Layer = "kv_memory"   // KV cache pressure drives the symptoms
	LayerClient    Layer = "client"      // the traffic itself (retries, timeouts)
	LayerTransport Layer = "scrape"      // the replica cannot be reached
	LayerProcess   Layer = "process"     // the server process (crash, restart, hang, startup)
	LayerTransfer  Layer = "kv_transfer" // PD disaggregation: KV hand-over between prefill and decode
	LayerGPU       Layer = "gpu"         // the GPU under the replica (dcgm-exporter)
)

// KindGPU is the Kind of a replica that is one GPU a dcgm-exporter target
// exposes; its Labels hold the GPU's identity and the pod that holds it
// (series.GPUNode...).
const KindGPU = "gpu"

// Replica describes the replica a window belongs to.
type Replica struct {
	Name   string // unique replica name (target name, or target/worker)
	Target string // configured target name
	Kind   string // "engine", "gateway" or KindGPU
	// Address is where the replica serves, as a gateway names its workers
	// (series.WorkerAddress): "10.0.0.1:30000". "" when unknown.
	Address    string
	Model      string // served model name, "" when not exposed
	EngineType string // unified, prefill, decode, "" when not exposed
	// Labels is target metadata from discovery (pod labels: model, role...);
	// for a GPU, its identity and pod (series.GPUNode...).
	Labels map[string]string
	// Pod is the Kubernetes status of the pod behind the replica (phase,
	// readiness, restarts, last termination); nil for targets not
	// discovered from Kubernetes. Read-only.
	Pod *series.Pod
}

// Match filters a series by one label. Value may list alternatives
// separated by "|". With Prefix, a label matches when it starts with one of
// the alternatives (status_code "4|5" matches 429 and 503); with Suffix, when
// it ends with one (mode "_hit" matches device_hit and host_hit); with both,
// when it does either. An absent label has the value "".
type Match struct {
	Label  string
	Value  string
	Prefix bool
	Suffix bool
}

// Selector picks the series of one family whose labels satisfy every match.
// Aggregating functions sum over the selected series, unless Combine says
// otherwise.
type Selector struct {
	Name    string
	Match   []Match
	Combine Combine
}

// Combine is how the gauge functions (Last, Avg, Max, Min, CountAbove) merge
// the selected series at one scrape. Increase and Rate always sum.
type Combine int

// Ways to combine series.
const (
	// CombineSum adds the series: counts (queued requests) add up across
	// data-parallel ranks.
	CombineSum Combine = iota
	// CombineMax takes the largest: ratios (KV usage) must not be added up
	// across ranks, and the fullest rank is the one that retracts.
	CombineMax
)

// Sel is shorthand for a selector with exact matches given as label, value
// pairs.
func Sel(name string, labelValues ...string) Selector {
	s := Selector{Name: name}
	for i := 0; i+1 < len(labelValues); i += 2 {
		s.Match = append(s.Match, Match{Label: labelValues[i], Value: labelValues[i+1]})
	}
	return s
}

// ScrapeState is what the window knows about scraping the replica.
type ScrapeState struct {
	LastAttempt         time.Time            // zero when never scraped
	LastSuccess         time.Time            // zero when never scraped successfully
	Up                  bool                 // the last scrape succeeded
	Reason              series.ScrapeFailure // why the last scrape failed; "" when it succeeded
	Status              int                  // HTTP status of the last failed scrape; 0 when there was no answer
	Error               string               // failure text of the last scrape, for people only (never holds secrets)
	ConsecutiveFailures int
	// ConsecutiveSuccesses counts the successful scrapes since the last
	// failure (or since the first scrape).
	ConsecutiveSuccesses int
	FirstSeen            time.Time // first scrape attempt kept in the window
	// ProbeAnswered says that the replica's health probe was taken during
	// its current run of failed scrapes and answered every time: the server
	// generates tokens while its /metrics fails.
	ProbeAnswered bool
	// LastOutage is the newest run of failed scrapes that ended with a
	// successful one; zero when there was none.
	LastOutage Outage
	// PodRestarts are the times, oldest first and within the window's
	// retention, at which the Kubernetes restart count of the replica's pod
	// was seen to go up (a container restart, also one that never answered
	// a scrape). Read-only.
	PodRestarts []time.Time
}

// Outage is a run of consecutive failed scrapes.
type Outage struct {
	From     time.Time            // first failed scrape
	To       time.Time            // the successful scrape that ended it
	Failures int                  // failed scrapes in the run
	Reason   series.ScrapeFailure // reason of its last failed scrape
	Status   int                  // HTTP status of its last failed scrape, if any
}

// Window is a read-only view of one replica's recent samples. Every range
// function covers samples with from < t <= to. Aggregates sum over the series
// a selector picks; ok is false when there is not enough data to answer
// (missing family, fewer than two points for a rate, NaN/Inf only, no
// observations), never a made-up zero.
type Window interface {
	Replica() Replica
	Scrape() ScrapeState

	// Last returns the newest value (latest successful scrape only) summed over
	// the selected series.
	Last(sel Selector) (float64, bool)
	// Has reports whether the family exists in the latest successful scrape.
	Has(name string) bool

	// Increase of a counter over the range, reset-aware: a drop is a restart
	// and the post-reset value counts as increase, as Prometheus' rate does.
	Increase(sel Selector, from, to time.Time) (float64, bool)
	// Rate is Increase divided by the span actually covered by samples, per second.
	Rate(sel Selector, from, to time.Time) (float64, bool)

	// Avg, Max and Min over the range of a gauge (per scrape, summed over the
	// selected series first).
	Avg(sel Selector, from, to time.Time) (float64, bool)
	Max(sel Selector, from, to time.Time) (float64, bool)
	Min(sel Selector, from, to time.Time) (float64, bool)

	// Quantile of a histogram family (base name, without _bucket) over the
	// increase of its buckets in the range; bucket bounds come from "le".
	// The daemon's window keeps a histogram's buckets, _sum and _count at
	// about one point a minute (the same scrapes for all three) once they
	// are older than 15 minutes (window.Options.HistogramFullResolution),
	// so a range reaching further back starts up to a minute late: a
	// baseline's quantile, mean or observation count is that of the
	// baseline minus at most its first minute.
	Quantile(q float64, family string, match []Match, from, to time.Time) (float64, bool)
	// Observations is the increase of the histogram's _count over the range.
	Observations(family string, match []Match, from, to time.Time) (float64, bool)

	// LabelValues are the values label takes across the series of family
	// in the newest successful scrape, sorted, without "". The gateway's
	// per-worker series (one per worker URL) are read worker by worker
	// through it.
	LabelValues(family, label string) []string

	// Restarts counts the resets of the replica in the range: a scrape at
	// which most counters dropped, or the process start time changed.
	Restarts(from, to time.Time) int
	// LastRestart is the time of the newest restart seen, zero when none.
	LastRestart() time.Time
}

// ScrapeCounter is an optional extension of Window. CountAbove returns how
// many scrapes in the range had a value (the selected series combined per
// sel.Combine) above threshold, and how many had a finite value at all.
// Detectors use it
// for lossy point-in-time gauges (the legacy sglang:num_retracted_reqs) where
// "non-zero in several scrapes" is the only usable signal; a Window without
// it simply gives those fallbacks no verdict.
type ScrapeCounter interface {
	CountAbove(sel Selector, threshold float64, from, to time.Time) (above, scrapes int)
	// CountWhere is CountAbove with a test of its own: how many scrapes
	// had a finite combined value for which match is true (a bitmask with
	// a bit set).
	CountWhere(sel Selector, match func(float64) bool, from, to time.Time) (matching, scrapes int)
}

// PointFinder is an optional extension of Window. Present reports whether
// any selected series had a finite value in the range: what Max's ok
// reports, without the maximum, which costs a decode of every point of a
// range whose series are summed. Baselines ask it of their halves every
// round; a Window without it is asked Max instead.
type PointFinder interface {
	Present(sel Selector, from, to time.Time) bool
}

// Evidence is one number a finding rests on, with the baseline it is
// compared against.
type Evidence struct {
	Name        string  `json:"name"`  // human label, e.g. "retractions/s"
	Value       float64 `json:"value"` // current value
	Baseline    float64 `json:"baseline,omitempty"`
	HasBaseline bool    `json:"has_baseline,omitempty"`
	Unit        string  `json:"unit,omitempty"`      // "", "s", "%", "/s", "ratio"
	Threshold   string  `json:"threshold,omitempty"` // the rule it crossed, e.g. "> 5x baseline"
	// Limit is the number the detector compared Value with (an absolute
	// threshold, or factor x baseline), when HasLimit: the line a plot
	// draws. Value is on the side Threshold names.
	Limit    float64 `json:"limit,omitempty"`
	HasLimit bool    `json:"has_limit,omitempty"`
	// SampleSize marks a count of the data the verdict rests on (prompt
	// tokens, first tokens in range): context for the rule, not a signal
	// of the incident, so a resolve gives no worst value of it.
	SampleSize bool `json:"sample_size,omitempty"`
	// LowerWorse marks a quantity whose lower values are the worse ones
	// (completions, throughput) where no rule on it says so.
	LowerWorse bool `json:"lower_worse,omitempty"`
	// Replica is the replica e measures when it is not the finding's own
	// (a gateway in front of it, in a joined incident); Name then starts
	// with it too.
	Replica string `json:"replica,omitempty"`
}

// Of returns e as a field of another replica's finding: named after
// replica too, so a page reading it knows whose number it is.
func (e Evidence) Of(replica string) Evidence {
	e.Name, e.Replica = replica+": "+e.Name, replica
	return e
}

// WithLimit returns e with the number its rule compared it with.
func (e Evidence) WithLimit(limit float64) Evidence {
	e.Limit, e.HasLimit = limit, true
	return e
}

// AsLowerWorse returns e marked as a quantity whose lower values are the
// worse ones.
func (e Evidence) AsLowerWorse() Evidence {
	e.LowerWorse = true
	return e
}

// LowerIsWorse reports whether a lower value of e is the worse one: a rule
// that fires below a limit ("<= 0.5x baseline"), a hit rate, a quantity
// marked LowerWorse. An incident's worst value of e is then its minimum.
func (e Evidence) LowerIsWorse() bool {
	t := strings.TrimSpace(e.Threshold)
	return e.LowerWorse || strings.HasPrefix(t, "<") || strings.HasPrefix(t, "≤") || strings.Contains(strings.ToLower(e.Name), "hit rate")
}

// Finding is one detector's verdict about one replica at one time.
type Finding struct {
	Class     Class      `json:"class"`
	Severity  Severity   `json:"-"`
	Replica   string     `json:"replica"`
	Model     string     `json:"model,omitempty"`
	Layer     Layer      `json:"layer"`
	Summary   string     `json:"summary"`   // one line: what is happening
	Diagnosis string     `json:"diagnosis"` // which layer fails and the likely cause
	Evidence  []Evidence `json:"evidence"`
	Emergency []string   `json:"emergency_steps"`
	RootCause []string   `json:"root_cause_steps"`
	Runbook   string     `json:"runbook"` // runbook path, e.g. "/runbooks/preempt_storm"
	// Resolving says the condition is gone and the finding tells how it
	// ended (replica_down: down for how long, restarted or not); the
	// resolve gives it instead of the incident at its worst.
	Resolving bool `json:"-"`
	// Triage is the runbook's layer triage of a latency-type finding (running
	// vs waiting vs latency), one line with the next step: "admission
	// bottleneck (...). Next step: ...". Empty for other findings.
	Triage string `json:"triage,omitempty"`
	// TriageVerdict is Triage's verdict in machine form.
	TriageVerdict TriageVerdict `json:"triage_verdict,omitempty"`
	// Consequences are the classes this finding explains on the same
	// replica, folded into it by correlation (one page per cause).
	Consequences []Class `json:"consequences,omitempty"`
	// Upstream is, on a gateway's finding, what the gateway says of the
	// workers behind it: which its failures come from. Nil elsewhere.
	Upstream *Upstream `json:"upstream,omitempty"`
	// AffectedReplicas lists the replicas of a fleet-wide finding.
	AffectedReplicas []string `json:"affected_replicas,omitempty"`
	// Baselines are the levels the verdict compared against, by the
	// detector's own names: the alert tracker freezes them when the
	// incident begins and gives them back as a Reference while it lasts.
	Baselines map[string]float64 `json:"baselines,omitempty"`
}

// Detector inspects one replica's window at time now.
type Detector interface {
	Class() Class
	Detect(w Window, now time.Time) []Finding
}

// RunbookPath is the daemon-relative runbook link of a class.
func RunbookPath(c Class) string { return "/runbooks/" + string(c) }

// Explains reports whether finding cause, active on the same replica,
// explains finding effect, by the causal positions the detectors of the
// Registry declare (Catalog.Explains).
//
// The runbook's mechanism chain
//
//	cache collapse -> KV pressure (kv_saturation) -> retractions
//	(preempt_storm) -> queue growth and latency (decode_slowdown,
//	queue_latency) -> client timeouts -> retries (retry_avalanche)
//	-> failed requests (error_rate)
//
// is an order: each detector on it declares its stage, and a cause
// explains every finding further down the chain, not only the next one,
// because the links in between need not be firing (a storm can drive
// clients into retries before the queue detector's range has filled).
// Off the chain, a detector declares the classes its findings explain, or
// the classes that explain its findings: an engine hang freezes the KV
// gauges and stalls every request; a crash/restart explains the cold start
// that follows; a target without metrics explains the scrape failure
// replica_down reports for it. Failed requests (error_rate) are where
// every cause ends, and they explain nothing.
//
// The relation is acyclic and irreflexive, so grouping by it always finds
// a root cause.
func Explains(cause, effect Finding) bool { return Registry().Explains(cause, effect) }

// SelfSustaining is Registry().SelfSustaining(f).
func SelfSustaining(f Finding) bool { return Registry().SelfSustaining(f) }

// Title is Registry().Title(class).
func Title(class Class) string { return Registry().Title(class) }
