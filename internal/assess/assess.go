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
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
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
}

// New returns an assessor over the given detectors.
func New(detectors []detect.Detector, cfg Config) *Assessor {
	if cfg.ArrivalEndpoints == "" {
		cfg.ArrivalEndpoints = detect.DefaultInferenceEndpoints
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	return &Assessor{cfg: cfg, detectors: detectors}
}

// Detectors are the detectors the assessor runs, in order.
func (a *Assessor) Detectors() []detect.Detector { return a.detectors }

// Replica is one replica's state in a round.
type Replica struct {
	Replica  detect.Replica      `json:"replica"`
	Scrape   detect.ScrapeState  `json:"scrape"`
	Snapshot Snapshot            `json:"snapshot"`
	Triage   detect.TriageResult `json:"triage"`
	// Findings are the detectors' verdicts on this replica, before
	// correlation.
	Findings []detect.Finding `json:"findings,omitempty"`
}

// Round is the one result of an evaluation round.
type Round struct {
	At time.Time `json:"at"`
	// Replicas by name.
	Replicas []Replica `json:"replicas"`
	// Groups are the correlated findings: what may page.
	Groups []correlate.Group `json:"-"`
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
// frozen baselines. nil: none.
func (a *Assessor) Assess(ws Windows, now time.Time, refs map[string]detect.References) Round {
	reps := ws.Replicas()
	sort.Slice(reps, func(i, j int) bool { return reps[i].Name < reps[j].Name })
	states := make([]Replica, len(reps))
	held := make([]bool, len(reps))
	assess := func(i int) {
		held[i] = ws.View(reps[i].Name, func(w detect.Window) {
			states[i] = a.replica(detect.WithReferences(w, refs[reps[i].Name]), now)
		})
	}
	if workers := min(a.cfg.Workers, len(reps)); workers <= 1 {
		for i := range reps {
			assess(i)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := int(next.Add(1) - 1); i < len(reps); i = int(next.Add(1) - 1) {
					assess(i)
				}
			})
		}
		wg.Wait()
	}
	round := Round{At: now, Replicas: make([]Replica, 0, len(reps))}
	var all []detect.Finding
	for i, st := range states {
		if !held[i] {
			continue // removed since Replicas listed it
		}
		round.Replicas = append(round.Replicas, st)
		all = append(all, st.Findings...)
	}
	round.Groups = correlate.Correlate(a.cfg.Correlation, all, reps)
	return round
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

func (a *Assessor) replica(w detect.Window, now time.Time) Replica {
	st := Replica{Replica: w.Replica(), Scrape: w.Scrape()}
	for _, d := range a.detectors {
		st.Findings = append(st.Findings, d.Detect(w, now)...)
	}
	latencyHigh := false
	for _, f := range st.Findings {
		latencyHigh = latencyHigh || f.Class == detect.QueueLatency || f.Class == detect.DecodeSlowdown
	}
	st.Triage = a.cfg.Triage.Classify(w, now, latencyHigh)
	st.Snapshot = ReadSnapshot(w, now.Add(-a.cfg.Triage.Range), now, a.cfg.ArrivalEndpoints)
	// One triage per replica: every finding that carries one carries this.
	for i := range st.Findings {
		if st.Findings[i].Triage != "" {
			st.Findings[i].Triage = st.Triage.String()
			st.Findings[i].TriageVerdict = st.Triage.Verdict
		}
	}
	return st
}
