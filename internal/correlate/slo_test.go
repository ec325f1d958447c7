package correlate

import (
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// A burn nothing explains is its own group on fleet/<model>; a detector
// group of the same model carries it instead (one page), whatever its
// replica; another model's group does not.
func TestBurnsAreFiledUnderTheirModelsIncident(t *testing.T) {
	burn := func(model string, sev detect.Severity) Burn {
		return Burn{
			Finding:  detect.Finding{Class: SLOBurn, Replica: FleetReplica(model), Model: model, Severity: sev, Summary: "burn of " + model},
			Headline: "burning the SLO of " + model,
			Evidence: []detect.Evidence{{Name: `SLO "x": burn rate over 1h`, Value: 20}},
		}
	}
	storm := Group{Finding: detect.Finding{Class: detect.PreemptStorm, Replica: "r1", Model: "a", Severity: detect.Warning, Summary: "storm"}}
	storm.Members = []detect.Finding{storm.Finding}
	other := Group{Finding: detect.Finding{Class: detect.CacheCollapse, Replica: "r9", Model: "b", Severity: detect.Critical, Summary: "collapse"}}
	other.Members = []detect.Finding{other.Finding}

	groups := FileBurns([]Group{storm, other}, []Burn{burn("a", detect.Critical), burn("c", detect.Warning), burn("c", detect.Critical)})
	if len(groups) != 3 {
		t.Fatalf("groups: %+v", groups)
	}
	g := groups[0]
	if g.Cause() != detect.PreemptStorm || g.Finding.Severity != detect.Critical || len(g.Members) != 2 ||
		g.Finding.Summary != "storm; burning the SLO of a" || g.Finding.Evidence[0].Name != `SLO "x": burn rate over 1h` {
		t.Errorf("the storm's group: %+v", g)
	}
	if len(groups[1].Members) != 1 {
		t.Errorf("model b's group took a burn: %+v", groups[1])
	}
	alone := groups[2]
	if alone.Cause() != SLOBurn || alone.Finding.Replica != "fleet/c" || alone.Finding.Severity != detect.Critical || len(alone.Members) != 2 {
		t.Errorf("model c's burns: %+v", alone)
	}
}
