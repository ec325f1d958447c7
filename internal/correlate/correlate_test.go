package correlate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

func f(replica, model string, class detect.Class, layer detect.Layer, sev detect.Severity) detect.Finding {
	return detect.Finding{Class: class, Replica: replica, Model: model, Layer: layer, Severity: sev,
		Summary: string(class) + " summary", Diagnosis: string(class) + " diagnosis",
		Evidence: []detect.Evidence{{Name: string(class) + " signal", Value: 1}}}
}

func replicas(model string, n int) []detect.Replica {
	var out []detect.Replica
	for i := 0; i < n; i++ {
		out = append(out, detect.Replica{Name: fmt.Sprintf("%s-%d", model, i), Model: model})
	}
	return out
}

func classes(is []Group) []string {
	var out []string
	for _, x := range is {
		out = append(out, string(x.Finding.Class)+"@"+x.Finding.Replica)
	}
	return out
}

func TestCacheCollapseDrivingAStormIsOneIncidentNamedAfterTheCollapse(t *testing.T) {
	in := []detect.Finding{
		f("r1", "m", detect.PreemptStorm, detect.LayerMemory, detect.Critical),
		f("r1", "m", detect.CacheCollapse, detect.LayerPrefill, detect.Warning), // prompts changed: the cause
	}
	out := Correlate(DefaultConfig(), in, replicas("m", 1))
	if len(out) != 1 || out[0].Finding.Class != detect.CacheCollapse {
		t.Fatalf("want one cache_collapse incident, got %v", classes(out))
	}
	root := out[0].Finding
	if len(root.Consequences) != 1 || root.Consequences[0] != detect.PreemptStorm {
		t.Errorf("consequences %v", root.Consequences)
	}
	if root.Severity != detect.Critical {
		t.Errorf("incident severity %v, want the worst symptom's (critical)", root.Severity)
	}
	if !strings.Contains(root.Diagnosis, "preempt_storm") || len(root.Evidence) != 2 {
		t.Errorf("consequence not described: %q, evidence %v", root.Diagnosis, root.Evidence)
	}
}

func TestWholeChainFoldsIntoItsEarliestCause(t *testing.T) {
	in := []detect.Finding{
		f("r1", "m", detect.RetryAvalanche, detect.LayerClient, detect.Critical),
		f("r1", "m", detect.PreemptStorm, detect.LayerMemory, detect.Critical),
		f("r1", "m", detect.CacheCollapse, detect.LayerPrefill, detect.Warning),
		f("r2", "m", detect.RetryAvalanche, detect.LayerClient, detect.Critical), // another replica: its own incident
	}
	out := Correlate(DefaultConfig(), in, replicas("m", 4))
	got := strings.Join(classes(out), ",")
	if got != "cache_collapse@r1,retry_avalanche@r2" {
		t.Fatalf("got %s", got)
	}
	if c := out[0].Finding.Consequences; len(c) != 2 {
		t.Errorf("root consequences %v, want storm and avalanche", c)
	}
}

func TestEvictionDrivenCollapseFoldsIntoTheStorm(t *testing.T) {
	in := []detect.Finding{
		f("r1", "m", detect.CacheCollapse, detect.LayerMemory, detect.Critical),
		f("r1", "m", detect.PreemptStorm, detect.LayerMemory, detect.Critical),
	}
	out := Correlate(DefaultConfig(), in, replicas("m", 1))
	if len(out) != 1 || out[0].Finding.Class != detect.PreemptStorm || out[0].Finding.Consequences[0] != detect.CacheCollapse {
		t.Fatalf("got %v", classes(out))
	}
}

func TestUnrelatedFindingsStaySeparate(t *testing.T) {
	in := []detect.Finding{
		f("r1", "m", detect.ReplicaDown, detect.LayerProcess, detect.Critical),
		f("r1", "m", detect.CacheCollapse, detect.LayerPrefill, detect.Warning),
	}
	if out := Correlate(DefaultConfig(), in, replicas("m", 5)); len(out) != 2 {
		t.Fatalf("got %v", classes(out))
	}
	cfg := DefaultConfig()
	cfg.FoldConsequences = false
	in = []detect.Finding{f("r1", "m", detect.PreemptStorm, detect.LayerMemory, detect.Critical), f("r1", "m", detect.CacheCollapse, detect.LayerPrefill, detect.Warning)}
	if out := Correlate(cfg, in, replicas("m", 5)); len(out) != 2 {
		t.Fatalf("folding disabled but got %v", classes(out))
	}
}

func TestTenReplicasCollapsingTogetherAreOneFleetIncident(t *testing.T) {
	var in []detect.Finding
	reps := append(replicas("llama", 10), replicas("qwen", 4)...)
	for i := 0; i < 10; i++ {
		in = append(in, f(fmt.Sprintf("llama-%d", i), "llama", detect.CacheCollapse, detect.LayerPrefill, detect.Warning))
	}
	in = append(in, f("qwen-0", "qwen", detect.CacheCollapse, detect.LayerPrefill, detect.Warning)) // 1 of 4: not fleet-wide
	out := Correlate(DefaultConfig(), in, reps)
	if len(out) != 2 {
		t.Fatalf("want one fleet incident plus qwen-0's own, got %v", classes(out))
	}
	var fl detect.Finding
	for _, x := range out {
		if x.Finding.Replica == FleetReplica("llama") {
			fl = x.Finding
			if !x.Fleet || len(x.Members) != 10 {
				t.Errorf("fleet incident: fleet=%v members=%d", x.Fleet, len(x.Members))
			}
		}
	}
	if fl.Class != detect.CacheCollapse || len(fl.AffectedReplicas) != 10 || !strings.Contains(fl.Summary, "10 of 10") {
		t.Fatalf("fleet finding: %+v", fl)
	}
	if !strings.Contains(fl.Diagnosis, "router") {
		t.Errorf("fleet diagnosis does not point at shared causes: %q", fl.Diagnosis)
	}
}

func TestFleetNeedsMostOfAFleetOfMinimumSize(t *testing.T) {
	cases := []struct {
		name     string
		fleet    int
		affected int
		grouped  bool
	}{
		{"2 of 10", 10, 2, false},
		{"5 of 10 (half)", 10, 5, true},
		{"2 of 2: too small a fleet", 2, 2, false},
		{"3 of 3", 3, 3, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var in []detect.Finding
			for i := 0; i < c.affected; i++ {
				in = append(in, f(fmt.Sprintf("m-%d", i), "m", detect.PreemptStorm, detect.LayerMemory, detect.Critical))
			}
			out := Correlate(DefaultConfig(), in, replicas("m", c.fleet))
			grouped := len(out) == 1 && out[0].Fleet && out[0].Finding.Replica == FleetReplica("m")
			if grouped != c.grouped {
				t.Fatalf("grouped=%v, want %v: %v", grouped, c.grouped, classes(out))
			}
		})
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Config{FleetMinReplicas: 1, FleetFraction: 1.5}.Validate()
	if err == nil || !strings.Contains(err.Error(), "correlation.fleet_min_replicas") || !strings.Contains(err.Error(), "correlation.fleet_fraction") {
		t.Fatalf("got %v", err)
	}
}

// A consequence's copy of a quantity the cause already shows, under a
// qualified name, is not shown twice.
func TestConsequenceEvidenceIsNotRepeated(t *testing.T) {
	storm := f("r1", "m", detect.RetryAvalanche, detect.LayerClient, detect.Critical)
	storm.Evidence = []detect.Evidence{
		{Name: "aborted requests/s", Value: 14, Unit: "/s"},
		{Name: "offered load/s (highest fresh arrivals since the growth began)", Value: 10, Unit: "/s"},
	}
	errs := f("r1", "m", detect.ErrorRate, detect.LayerQueue, detect.Critical)
	errs.Evidence = []detect.Evidence{
		{Name: "failed share of requests", Value: 1, Unit: "ratio"},
		{Name: "aborted requests/s (clients gave up)", Value: 14, Unit: "/s"},
		{Name: "offered load/s (highest fresh arrivals in the look-back)", Value: 10, Unit: "/s"},
	}
	out := Correlate(DefaultConfig(), []detect.Finding{storm, errs}, replicas("m", 1))
	if len(out) != 1 {
		t.Fatalf("want one incident, got %v", classes(out))
	}
	var names []string
	for _, e := range out[0].Finding.Evidence {
		names = append(names, e.Name)
	}
	want := "aborted requests/s|offered load/s (highest fresh arrivals since the growth began)|failed share of requests"
	if got := strings.Join(names, "|"); got != want {
		t.Errorf("evidence %s, want %s", got, want)
	}
}

// Every replica of the fleet at its cap with requests waiting is a fleet
// short of capacity: the page says so and its steps are the fleet's.
func TestSaturatedFleetLacksCapacity(t *testing.T) {
	var in []detect.Finding
	for i := 0; i < 4; i++ {
		x := f(fmt.Sprintf("m-%d", i), "m", detect.QueueLatency, detect.LayerQueue, detect.Critical)
		x.TriageVerdict = detect.TriageSaturated
		x.Emergency = []string{"Add replicas or shift traffic to less loaded ones on this replica."}
		in = append(in, x)
	}
	out := Correlate(DefaultConfig(), in, replicas("m", 4))
	if len(out) != 1 || !out[0].Fleet {
		t.Fatalf("want one fleet incident, got %v", classes(out))
	}
	fl := out[0].Finding
	if !strings.Contains(fl.Diagnosis, "lacks capacity") || strings.Contains(fl.Diagnosis, "deploy") || strings.Contains(fl.Diagnosis, "prompt change") {
		t.Errorf("saturated fleet diagnosis: %s", fl.Diagnosis)
	}
	steps := strings.Join(fl.Emergency, " ")
	if !strings.Contains(steps, "Scale out") || !strings.Contains(steps, "shed at the gateway") || strings.Contains(steps, "this replica") {
		t.Errorf("saturated fleet steps: %v", fl.Emergency)
	}

	// One replica with room left: not every replica is full, so a shared
	// change is the suspect, and the steps are still the fleet's.
	in[2].TriageVerdict = detect.TriageAdmission
	fl = Correlate(DefaultConfig(), in, replicas("m", 4))[0].Finding
	if !strings.Contains(fl.Diagnosis, "shared") || strings.Contains(fl.Diagnosis, "lacks capacity") {
		t.Errorf("mixed fleet diagnosis: %s", fl.Diagnosis)
	}
	if steps := strings.Join(fl.Emergency, " "); strings.Contains(steps, "this replica") || !strings.Contains(steps, "every replica") {
		t.Errorf("mixed fleet steps: %v", fl.Emergency)
	}
}

// A replica down while most of its model still serves is a warning; the
// last one standing, enough of the model at once, or a replica whose
// requests fail, is critical.
func TestReplicaDownSeverityFollowsWhatIsLeftServing(t *testing.T) {
	replicas := func(n int) []detect.Replica {
		var out []detect.Replica
		for i := range n {
			out = append(out, detect.Replica{Name: fmt.Sprintf("m-%d", i), Model: "m"})
		}
		return out
	}
	down := func(name string) detect.Finding {
		return detect.Finding{Class: detect.ReplicaDown, Severity: detect.Critical, Replica: name, Model: "m", Layer: detect.LayerTransport}
	}
	severity := func(gs []Group, replica string) detect.Severity {
		for _, g := range gs {
			if g.Finding.Replica == replica {
				return g.Finding.Severity
			}
		}
		t.Fatalf("no group for %s in %+v", replica, gs)
		return 0
	}
	cfg := DefaultConfig()
	if got := severity(Correlate(cfg, []detect.Finding{down("m-0")}, replicas(10)), "m-0"); got != detect.Warning {
		t.Errorf("one of ten down: %s, want warning", got)
	}
	if got := severity(Correlate(cfg, []detect.Finding{down("m-0"), down("m-1")}, replicas(10)), "m-0"); got != detect.Critical {
		t.Errorf("two of ten down: %s, want critical", got)
	}
	if got := severity(Correlate(cfg, []detect.Finding{down("m-0")}, replicas(1)), "m-0"); got != detect.Critical {
		t.Errorf("the last one standing: %s, want critical", got)
	}
	failing := detect.Finding{Class: detect.ErrorRate, Severity: detect.Critical, Replica: "m-0", Model: "m"}
	if got := severity(Correlate(cfg, []detect.Finding{down("m-0"), failing}, replicas(10)), "m-0"); got != detect.Critical {
		t.Errorf("one of ten down with its requests failing: %s, want critical", got)
	}
}
