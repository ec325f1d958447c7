package correlate

import (
	"slices"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// SLOBurn is the class of an SLO's error budget burning (internal/slo):
// a model-wide finding, shown under FleetReplica(model), made from the
// model's events rather than by a detector from one replica's window.
const SLOBurn detect.Class = "slo_burn"

// Burn is one SLO burning on a model (internal/slo), for FileBurns.
type Burn struct {
	// Finding is its page standing on its own: class SLOBurn, replica
	// FleetReplica(model).
	Finding detect.Finding
	// Headline is the burn in a phrase for another incident's page:
	// "burning the TTFT ≤ 1s for 99.5% SLO "chat" at 20x over 1h and
	// 30x over 5m".
	Headline string
	// Evidence are its numbers, named for another incident's page.
	Evidence []detect.Evidence
}

// FileBurns files each SLO burn under the group of its model that
// explains it: whatever a detector found on the model's replicas (or
// across its fleet) is what users feel, so the most severe such group
// carries the burn (its headline in the summary and diagnosis, its
// numbers in the evidence, its severity if higher) and no second page
// goes out. A burn nothing on its model explains stands on its own; the
// burns of one model standing alone are one group, named after the most
// severe (the first among equals), so the model has one SLO page.
func FileBurns(groups []Group, burns []Burn) []Group {
	if len(burns) == 0 {
		return groups
	}
	burns = slices.Clone(burns)
	slices.SortStableFunc(burns, func(a, b Burn) int { return int(b.Finding.Severity) - int(a.Finding.Severity) })
	var alone []Group
	for _, b := range burns {
		host := -1
		for i, g := range groups {
			if g.Finding.Model != b.Finding.Model || g.Cause() == SLOBurn {
				continue
			}
			if host < 0 || g.Finding.Severity > groups[host].Finding.Severity {
				host = i
			}
		}
		if host >= 0 {
			groups[host].Members = append(slices.Clone(groups[host].Members), b.Finding)
			groups[host].Finding = withBurn(groups[host].Finding, b)
			continue
		}
		j := slices.IndexFunc(alone, func(g Group) bool { return g.Finding.Model == b.Finding.Model })
		if j < 0 {
			alone = append(alone, Group{Finding: b.Finding, Members: []detect.Finding{b.Finding}})
			continue
		}
		alone[j].Members = append(alone[j].Members, b.Finding)
		alone[j].Finding = withBurn(alone[j].Finding, b)
	}
	return append(groups, alone...)
}

// withBurn adds burn b to finding f: its headline, its evidence and its
// severity when higher (an incident is as bad as its worst symptom).
func withBurn(f detect.Finding, b Burn) detect.Finding {
	f.Evidence = slices.Clone(f.Evidence)
	f.Summary = strings.TrimSpace(f.Summary + "; " + b.Headline)
	f.Diagnosis = strings.TrimSpace(f.Diagnosis + " This incident is " + b.Headline +
		": users get less than they were promised, and the error budget goes with every minute it lasts.")
	for _, e := range b.Evidence {
		if !hasEvidence(f.Evidence, e.Name) {
			f.Evidence = append(f.Evidence, e)
		}
	}
	f.Severity = max(f.Severity, b.Finding.Severity)
	return f
}
