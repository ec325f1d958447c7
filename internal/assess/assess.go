// Package assess is the watchdog's one decision per evaluation round. From
// every replica's window at a time now it computes, once:
//
//   - each replica's snapshot: the runbook's first look (running, queued,
//     KV usage, prefix hit rate, throughput, latency tails, failures);
//   - each replica's layer triage, the single one every view shows;
//   - the detectors' findings, carrying that triage;
//   - the incidents: findings grouped into causes and their consequences,
//     per replica and across a model's fleet (internal/correlate).
//
// The daemon's loop, `watchdog diagnose` and the HTTP API render a Round;
// none of them reads a window to re-derive a number. It is pure: windows
// and a time in, a Round out.
package assess

import (
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Windows is what an assessment reads: the window store, or diagnose's
// private one. View is called for several replicas at once.
type Windows interface {
	Replicas() []detect.Replica
	View(replica string, fn func(w detect.Window)) bool
}

// Config of the assessment.
type Config struct {
	// Triage tunes the layer triage; its Range is also the span the
	// snapshot's rates and quantiles cover.
	Triage detect.TriageConfig
	// Correlation groups findings into incidents.
	Correlation correlate.Config
	// ArrivalEndpoints selects inference traffic among the HTTP in-flight
	// series ("|"-separated endpoint values); "" takes the default.
	ArrivalEndpoints string
	// SLOs is the memory of the service level objectives' events per
	// model (internal/slo), which the evaluation loop records each
	// round's events into; nil: no objectives. The assessment only reads
	// it.
	SLOs *slo.Book
	// Workers is how many replicas are assessed at once (0: GOMAXPROCS).
	// A replica's assessment reads only its own window, so a round over
	// many replicas spreads over the cores; the result does not depend
	// on it.
	Workers int
}

// Assessor runs the detectors and the correlation over windows.
type Assessor struct {
	cfg       Config
	detectors []detect.Detector
	// observers are the detectors a replica's healthy peers can give a
	// baseline to (see peers.go).
	observers []detect.PeerObserver
}

// New returns an assessor over the given detectors.
func New(detectors []detect.Detector, cfg Config) *Assessor {
	if cfg.ArrivalEndpoints == "" {
		cfg.ArrivalEndpoints = detect.DefaultInferenceEndpoints
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	a := &Assessor{cfg: cfg, detectors: detectors}
	for _, d := range detectors {
		if o, ok := d.(detect.PeerObserver); ok {
			a.observers = append(a.observers, o)
		}
	}
	return a
}

// Detectors are the detectors the assessor runs, in order.
func (a *Assessor) Detectors() []detect.Detector { return a.detectors }

// Replica is one replica's state in a round.
type Replica struct {
	Replica  detect.Replica     `json:"replica"`
	Scrape   detect.ScrapeState `json:"scrape"`
	Snapshot Snapshot           `json:"snapshot"`
	// Recent is the part of the snapshot a resolve shows (ReadRecent)
	// over the last RecentSpan of the round: what a resolve calls now. The
	// snapshot's minute still holds the tail of an incident that ended
	// seconds ago.
	Recent Snapshot            `json:"recent"`
	Triage detect.TriageResult `json:"triage"`
	// Findings are the detectors' verdicts on this replica, before
	// correlation.
	Findings []detect.Finding `json:"findings,omitempty"`
	// SLI are the objectives' events on this replica this round (the
	// round's SLI sums them per model): what an incident on it spent.
	SLI []slo.Sample `json:"-"`
}

// Round is the one result of an evaluation round.
type Round struct {
	At time.Time `json:"at"`
	// Replicas by name.
	Replicas []Replica `json:"replicas"`
	// Groups are the correlated findings: what may page.
	Groups []correlate.Group `json:"-"`
	// SLI are the objectives' events of this round per model, since the
	// span the SLO memory ends at: what the loop records into it.
	SLI []slo.Sample `json:"-"`
	// SLOs are the objectives per model with this round's events: SLI,
	// burn rates and budget left (slo.go).
	SLOs []slo.Status `json:"slos,omitempty"`
}

// Findings are every replica's findings, in replica order.
func (r Round) Findings() []detect.Finding {
	var out []detect.Finding
	for _, rep := range r.Replicas {
		out = append(out, rep.Findings...)
	}
	return out
}

// Replica returns the named replica's state.
func (r Round) Replica(name string) (Replica, bool) {
	i := sort.Search(len(r.Replicas), func(i int) bool { return r.Replicas[i].Replica.Name >= name })
	if i < len(r.Replicas) && r.Replicas[i].Replica.Name == name {
		return r.Replicas[i], true
	}
	return Replica{}, false
}

// Assess evaluates every replica of ws at now. refs are the references
// (detect.Reference) the detectors of a replica compare against instead of
// the baselines they would read, by replica name: the open incidents'
// frozen baselines. nil: none. A replica without a ready baseline of its
// own is judged by its healthy peers (peers.go).
func (a *Assessor) Assess(ws Windows, now time.Time, refs map[string]detect.References) Round {
	reps := ws.Replicas()
	sort.Slice(reps, func(i, j int) bool { return reps[i].Name < reps[j].Name })
	states := make([]Replica, len(reps))
	held := make([]bool, len(reps))
	unready := make([][]detect.Class, len(reps))
	sli := make([][]slo.Sample, len(reps))
	since := a.sliSince()
	a.parallel(len(reps), func(i int) {
		held[i] = ws.View(reps[i].Name, func(w detect.Window) {
			states[i] = a.replica(detect.WithReferences(w, refs[reps[i].Name]), now)
			sli[i] = a.readSLI(w, since, now)
			if _, ok := peersOf(reps[i]); ok {
				unready[i] = a.unready(w, now, refs[reps[i].Name])
			}
		})
	})
	if slices.ContainsFunc(unready, func(cs []detect.Class) bool { return len(cs) > 0 }) {
		a.peerJudged(ws, now, reps, states, held, unready, refs)
	}
	round := Round{At: now, Replicas: make([]Replica, 0, len(reps))}
	var all []detect.Finding
	for i, st := range states {
		if !held[i] {
			continue // removed since Replicas listed it
		}
		st.SLI = sli[i]
		round.Replicas = append(round.Replicas, st)
		all = append(all, st.Findings...)
	}
	round.Groups = correlate.CorrelateGPUs(a.cfg.Correlation, all, reps, gpuUtil(round.Replicas))
	a.assessSLOs(&round, sli, held)
	return round
}

// gpuUtil is each GPU replica's lowest utilization over the snapshot's
// span, what the correlation reads of the GPUs.
func gpuUtil(states []Replica) map[string]float64 {
	var out map[string]float64
	for _, st := range states {
		if u := st.Snapshot.GPUUtilMin; u != nil {
			if out == nil {
				out = map[string]float64{}
			}
			out[st.Replica.Name] = *u
		}
	}
	return out
}

// AssessWindow evaluates one window at now: the replica's state and the
// incidents of that replica alone (no fleet grouping is possible).
func (a *Assessor) AssessWindow(w detect.Window, now time.Time) Round {
	st := a.replica(w, now)
	return Round{
		At:       now,
		Replicas: []Replica{st},
		Groups:   correlate.Correlate(a.cfg.Correlation, st.Findings, []detect.Replica{st.Replica}),
	}
}

// parallel calls fn(0) ... fn(n-1) on up to Workers goroutines.
func (a *Assessor) parallel(n int, fn func(i int)) {
	workers := min(a.cfg.Workers, n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				fn(i)
			}
		})
	}
	wg.Wait()
}

func (a *Assessor) replica(w detect.Window, now time.Time) Replica {
	st := Replica{Replica: w.Replica(), Scrape: w.Scrape()}
	for _, d := range a.detectors {
		st.Findings = append(st.Findings, d.Detect(w, now)...)
	}
	st.Triage = a.triage(w, now, st.Findings)
	st.Snapshot = ReadSnapshot(w, now.Add(-a.cfg.Triage.Range), now, a.cfg.ArrivalEndpoints)
	st.Recent = ReadRecent(w, now.Add(-RecentSpan(a.cfg.Triage)), now)
	st.annotate()
	return st
}

// RecentSpan is the span of a replica's Recent snapshot: a quarter of the
// triage range (15 s of the default minute), a few scrapes.
func RecentSpan(c detect.TriageConfig) time.Duration { return c.Range / 4 }

// triage is the replica's one layer triage at now, given its findings:
// what they established of its latency, and the cause they name.
func (a *Assessor) triage(w detect.Window, now time.Time, fs []detect.Finding) detect.TriageResult {
	return a.cfg.Triage.Classify(w, now, knownLatency(fs)).ExplainedBy(latencyCause(fs))
}

// latencyCause is the class of the finding among fs that explains the
// replica's latency, by the causal positions the detectors declare: one
// that explains a latency finding (queue_latency) and that no other such
// finding explains. "" when none does.
func latencyCause(fs []detect.Finding) detect.Class {
	latency := detect.Finding{Class: detect.QueueLatency}
	var causes []detect.Finding
	for _, f := range fs {
		if detect.Explains(f, latency) {
			causes = append(causes, f)
		}
	}
	for _, c := range causes {
		if !slices.ContainsFunc(causes, func(o detect.Finding) bool { return detect.Explains(o, c) }) {
			return c.Class
		}
	}
	return ""
}

// knownLatency is what the latency findings among fs established: a
// slower decode, or latency high; the triage judges the rest.
func knownLatency(fs []detect.Finding) detect.KnownLatency {
	known := detect.LatencyToJudge
	for _, f := range fs {
		switch f.Class {
		case detect.DecodeSlowdown:
			return detect.DecodeSlower
		case detect.QueueLatency:
			known = detect.LatencyHigh
		}
	}
	return known
}

// annotate gives every finding that carries a triage the replica's one.
func (st *Replica) annotate() {
	for i := range st.Findings {
		if st.Findings[i].Triage != "" {
			st.Findings[i].Triage = st.Triage.String()
			st.Findings[i].TriageVerdict = st.Triage.Verdict
		}
	}
}
