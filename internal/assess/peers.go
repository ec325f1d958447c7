package assess

import (
	"slices"
	"sort"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// A replica that has not been healthy long enough to have a baseline of
// its own (the watchdog or the replica just started) is judged by its
// healthy peers: the replicas serving the same model as the same engine
// type (the metrics carry no SGLang version; a release that reads another
// source, such as v0.4's hit-rate gauge, reports its levels under another
// name, so only like is compared with like). For each detector that is a
// detect.PeerObserver and lacks a ready baseline on a replica (and no
// frozen one), the replica's detectors are run again with a detect.Peers
// reference: per level, the median of the levels its peers show over the
// same range, peers with no finding and no open incident of that class.

// MinPeers is the fewest healthy peers a Peers reference rests on: two,
// so that no single replica defines normal for another, and a fleet of
// three still judges its one broken replica by the other two. A peer that
// is itself broken pulls the median towards paging less, never more: a
// lower hit rate and a slower latency both raise the bar.
const MinPeers = 2

// peerKey groups the replicas that are each other's peers.
type peerKey struct {
	model, engineType, kind string
}

func peersOf(r detect.Replica) (peerKey, bool) {
	return peerKey{r.Model, r.EngineType, r.Kind}, r.Model != ""
}

// unready are the classes of a's peer observers whose baseline is not
// ready on w and that have no frozen reference: the classes peers may
// judge.
func (a *Assessor) unready(w detect.Window, now time.Time, refs detect.References) []detect.Class {
	var out []detect.Class
	for _, o := range a.observers {
		if _, frozen := refs[o.Class()]; frozen {
			continue
		}
		if o.NeedsPeers(w, now) {
			out = append(out, o.Class())
		}
	}
	return out
}

// peerJudged assesses again, with Peers references, the replicas of
// states whose baselines are not ready (unready[i]) and that have enough
// healthy peers, in place. It runs only when some replica needs its
// peers: in the rounds of a warm-up.
func (a *Assessor) peerJudged(ws Windows, now time.Time, reps []detect.Replica, states []Replica, held []bool,
	unready [][]detect.Class, refs map[string]detect.References) {
	// Which classes each group of peers needs levels of.
	need := map[peerKey]map[detect.Class]bool{}
	members := map[peerKey][]int{}
	for i, r := range reps {
		k, ok := peersOf(r)
		if !ok || !held[i] {
			continue
		}
		members[k] = append(members[k], i)
		for _, c := range unready[i] {
			if need[k] == nil {
				need[k] = map[detect.Class]bool{}
			}
			need[k][c] = true
		}
	}
	// The levels of every healthy member, for the classes its group needs.
	levels := make([]map[detect.Class]map[string]float64, len(reps))
	var look []int
	for k, classes := range need {
		if len(members[k]) <= MinPeers {
			continue // too few to leave MinPeers beside the one judged
		}
		for _, i := range members[k] {
			if states[i].Scrape.Up && slices.ContainsFunc(a.observers, func(o detect.PeerObserver) bool {
				return classes[o.Class()] && a.healthy(states[i], refs[reps[i].Name], o.Class())
			}) {
				look = append(look, i)
			}
		}
	}
	a.parallel(len(look), func(j int) {
		i := look[j]
		k, _ := peersOf(reps[i])
		ws.View(reps[i].Name, func(w detect.Window) {
			levels[i] = map[detect.Class]map[string]float64{}
			for _, o := range a.observers {
				if need[k][o.Class()] && a.healthy(states[i], refs[reps[i].Name], o.Class()) {
					levels[i][o.Class()] = o.Levels(w, now)
				}
			}
		})
	})
	// The replicas their peers judge, with the references built.
	type judged struct {
		i    int
		refs detect.References
	}
	var again []judged
	for i := range reps {
		if len(unready[i]) == 0 || !held[i] {
			continue
		}
		k, ok := peersOf(reps[i])
		if !ok {
			continue
		}
		var peerRefs detect.References
		for _, c := range unready[i] {
			var peers []map[string]float64
			for _, j := range members[k] {
				if j != i && levels[j][c] != nil {
					peers = append(peers, levels[j][c])
				}
			}
			if ref, ok := peerReference(peers, now); ok {
				if peerRefs == nil {
					peerRefs = detect.References{}
				}
				peerRefs[c] = ref
			}
		}
		if peerRefs == nil {
			continue
		}
		for c, r := range refs[reps[i].Name] {
			peerRefs[c] = r // the frozen ones of the other classes
		}
		again = append(again, judged{i, peerRefs})
	}
	a.parallel(len(again), func(j int) {
		i, r := again[j].i, again[j].refs
		ws.View(reps[i].Name, func(w detect.Window) {
			states[i] = a.rejudge(states[i], detect.WithReferences(w, r), now, r)
		})
	})
}

// healthy reports whether st may stand for its peers in class c: no
// finding of c this round and no open incident of c (a frozen reference).
func (a *Assessor) healthy(st Replica, refs detect.References, c detect.Class) bool {
	if _, open := refs[c]; open {
		return false
	}
	return !slices.ContainsFunc(st.Findings, func(f detect.Finding) bool { return f.Class == c })
}

// peerReference is the median, level by level, of at least MinPeers
// peers' levels.
func peerReference(peers []map[string]float64, now time.Time) (detect.Reference, bool) {
	if len(peers) < MinPeers {
		return detect.Reference{}, false
	}
	byKey := map[string][]float64{}
	for _, p := range peers {
		for k, v := range p {
			byKey[k] = append(byKey[k], v)
		}
	}
	values := map[string]float64{}
	for k, vs := range byKey {
		if len(vs) >= MinPeers {
			values[k] = median(vs)
		}
	}
	if len(values) == 0 {
		return detect.Reference{}, false
	}
	return detect.Reference{Source: detect.Peers, Since: now, Values: values}, true
}

func median(vs []float64) float64 {
	sort.Float64s(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// rejudge runs again the detectors refs gives a Peers reference to, on w
// (which gives refs), and keeps st's other findings in detector order; the
// triage is classified again only when what the findings establish of the
// latency, or the cause they name, changed.
func (a *Assessor) rejudge(st Replica, w detect.Window, now time.Time, refs detect.References) Replica {
	before, beforeCause := knownLatency(st.Findings), latencyCause(st.Findings)
	again := func(c detect.Class) bool {
		r, ok := refs[c]
		return ok && r.Source == detect.Peers
	}
	var fs []detect.Finding
	for _, d := range a.detectors {
		if again(d.Class()) {
			fs = append(fs, d.Detect(w, now)...)
			continue
		}
		for _, f := range st.Findings {
			if f.Class == d.Class() {
				fs = append(fs, f)
			}
		}
	}
	// Findings of a class no detector names (none today) stay, last.
	for _, f := range st.Findings {
		if !slices.ContainsFunc(a.detectors, func(d detect.Detector) bool { return d.Class() == f.Class }) {
			fs = append(fs, f)
		}
	}
	st.Findings = fs
	if knownLatency(fs) != before || latencyCause(fs) != beforeCause {
		st.Triage = a.triage(w, now, fs)
	}
	st.annotate()
	return st
}
