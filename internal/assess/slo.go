package assess

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// SLILead is how far before the span of a round's SLO events the windows
// are read, to find the sample each counter's first step starts at: more
// than any scrape interval.
const SLILead = 5 * time.Minute

// SLOs is the memory of the objectives' events the assessment reads; nil
// without objectives.
func (a *Assessor) SLOs() *slo.Book { return a.cfg.SLOs }

// sliSince is where this round's SLO events start: the end of the span
// the memory last recorded; zero (no events this round) before the first
// or without objectives.
func (a *Assessor) sliSince() time.Time {
	if a.cfg.SLOs == nil {
		return time.Time{}
	}
	return a.cfg.SLOs.Since()
}

// readSLI counts, on one replica, the events of every objective covering
// it over (since, now]. A gateway's requests are not counted: they are
// the engines' requests again, seen in front of them.
func (a *Assessor) readSLI(w detect.Window, since, now time.Time) []slo.Sample {
	if a.cfg.SLOs == nil || since.IsZero() || !since.Before(now) {
		return nil
	}
	r := w.Replica()
	if r.Kind == "gateway" {
		return nil
	}
	var out []slo.Sample
	for _, o := range a.cfg.SLOs.Config().Objectives {
		if (o.Model != "" && o.Model != r.Model) || !labelsMatch(r.Labels, o.Match) {
			continue
		}
		ev, boundary, ok := o.Read(w, a.cfg.ArrivalEndpoints, since, now, SLILead)
		if !ok {
			continue
		}
		out = append(out, slo.Sample{Objective: o.Name, Model: r.Model, Events: ev, Boundary: boundary})
	}
	return out
}

func labelsMatch(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// assessSLOs sums the replicas' events per objective and model into the
// round's SLI, reads every objective's status with them and files the
// burning ones among the round's groups (correlate.FileBurns).
func (a *Assessor) assessSLOs(round *Round, perReplica [][]slo.Sample, held []bool) {
	if a.cfg.SLOs == nil {
		return
	}
	type key struct{ objective, model string }
	sums := map[key]slo.Sample{}
	for i, samples := range perReplica {
		if !held[i] {
			continue
		}
		for _, s := range samples {
			k := key{s.Objective, s.Model}
			sum := sums[k]
			sum.Objective, sum.Model, sum.Events = s.Objective, s.Model, sum.Events.Add(s.Events)
			sum.Boundary = max(sum.Boundary, s.Boundary)
			sums[k] = sum
		}
	}
	for _, k := range slices.SortedFunc(maps.Keys(sums), func(x, y key) int {
		if x.objective != y.objective {
			return strings.Compare(x.objective, y.objective)
		}
		return strings.Compare(x.model, y.model)
	}) {
		round.SLI = append(round.SLI, sums[k])
	}
	round.SLOs = a.cfg.SLOs.Status(round.At, round.SLI)
	var burns []correlate.Burn
	for _, st := range round.SLOs {
		f, ok := st.Finding(correlate.SLOBurn, correlate.FleetReplica(st.Model))
		if !ok {
			continue
		}
		burns = append(burns, correlate.Burn{Finding: f, Headline: st.Headline(), Evidence: st.Evidence(fmt.Sprintf("SLO %q: ", st.Objective))})
	}
	round.Groups = correlate.FileBurns(round.Groups, burns)
}
