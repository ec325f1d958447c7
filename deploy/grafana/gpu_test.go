package grafana

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
)

// gpuQueries are the dashboard's queries that read dcgm-exporter.
func gpuQueries(t *testing.T) []Query {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := Queries(b)
	if err != nil {
		t.Fatal(err)
	}
	var out []Query
	for _, q := range queries {
		if slices.ContainsFunc(q.Metrics, func(m string) bool { return strings.HasPrefix(m, "DCGM_FI_") }) {
			out = append(out, q)
		}
	}
	return out
}

// The GPU row has a panel per signal, each reading the replica's GPUs by
// its pod; the throttle panel reads the reasons under either name.
func TestGPUPanels(t *testing.T) {
	queries := gpuQueries(t)
	for _, title := range []string{"SM clock", "GPU temperature", "Power draw", "GPU utilization", "Clock-event reasons (throttling)", "Last Xid"} {
		if !slices.ContainsFunc(queries, func(q Query) bool { return strings.HasPrefix(q.Where, fmt.Sprintf("panel %q ", title)) }) {
			t.Errorf("no GPU panel %q", title)
		}
	}
	var bits []string
	for _, q := range queries {
		if !slices.Contains(q.Metrics, "sglang:num_running_reqs") || !strings.Contains(q.Expr, `on (namespace, pod)`) {
			t.Errorf("%s: not joined to the replicas by namespace and pod: %s", q.Where, q.Expr)
		}
		if slices.Contains(q.Metrics, sim.FieldClocksEventReasons) || slices.Contains(q.Metrics, sim.FieldClockThrottleReasons) {
			if bit := reasonBit.FindStringSubmatch(q.Expr); bit != nil {
				bits = append(bits, bit[1])
			}
			if !strings.Contains(q.Expr, sim.FieldClocksEventReasons+" or "+sim.FieldClockThrottleReasons) {
				t.Errorf("%s reads the reasons under one name only: %s", q.Where, q.Expr)
			}
		}
	}
	// HW slowdown, SW thermal, HW thermal, HW power brake.
	if slices.Sort(bits); !slices.Equal(bits, []string{"128", "32", "64", "8"}) {
		t.Errorf("the reasons panel shows bits %v, want 8, 32, 64 and 128", bits)
	}
}

// scrapeShape is how Prometheus stored a dcgm-exporter's series.
type scrapeShape struct {
	name string
	gpu  sim.GPUConfig
	// exporterKept: scraped without honor_labels, so the exporter pod's own
	// namespace/pod/container win and the GPU's become exported_*.
	exporterKept bool
	// sglangPodless: SGLang scraped without pod/namespace labels (a static
	// scrape configuration).
	sglangPodless bool
	joins         bool // the panels show each replica's GPU
}

// Every GPU query, run by Prometheus' own engine (promtool test rules) over
// series of the simulated fleet as Prometheus stores them, shows each
// replica's GPU under the replica's instance with the exporter's values --
// sim-0's thermal throttle among them -- and shows nothing when the GPU's
// pod is unknown, rather than another GPU.
func TestGPUPanelsJoinTheReplicasGPU(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is needed (Debian's prometheus package; .ci/run installs it): %v", err)
	}
	queries := gpuQueries(t)
	for _, shape := range []scrapeShape{
		{name: "pod labels", joins: true},
		{name: "pod labels beside the exporter's own", exporterKept: true, joins: true},
		{name: "older release", gpu: sim.GPUConfig{ThrottleReasonsLegacyName: true, XidLegacyLabels: true}, joins: true},
		{name: "no pod labels", gpu: sim.GPUConfig{NoPodLabels: true}, exporterKept: true},
		{name: "SGLang without pod labels", sglangPodless: true},
	} {
		t.Run(shape.name, func(t *testing.T) {
			sc := sim.GPUThermalScenario(1)
			start := time.Unix(1_700_000_000, 0)
			fleet := sim.NewFleet(sim.FleetConfig{Seed: 1, Start: start, Scenario: sc, Warmup: time.Minute, GPU: shape.gpu})
			at, _ := sc.Start("gpu_thermal")
			fleet.Advance(start.Add(at + time.Minute))

			var in []string
			var gpus []map[string]*dto.MetricFamily
			for i := range fleet.Nodes() {
				var b bytes.Buffer
				if err := fleet.WriteGPUMetrics(&b, i); err != nil {
					t.Fatal(err)
				}
				fams := parse(t, b.Bytes())
				gpus = append(gpus, fams)
				for _, f := range fams {
					for _, m := range f.GetMetric() {
						ls := map[string]string{"__name__": f.GetName(), "job": "dcgm-exporter", "instance": fmt.Sprintf("10.1.0.%d:9400", i)}
						for _, l := range m.GetLabel() {
							name := l.GetName()
							if shape.exporterKept && slices.Contains([]string{"namespace", "pod", "container"}, name) {
								name = "exported_" + name
							}
							ls[name] = l.GetValue()
						}
						if shape.exporterKept {
							ls["namespace"], ls["pod"], ls["container"] = "gpu-operator", fmt.Sprintf("nvidia-dcgm-exporter-%d", i), "nvidia-dcgm-exporter"
						}
						in = append(in, series(ls, value(m)))
					}
				}
				sglang := map[string]string{"__name__": "sglang:num_running_reqs", "model_name": "Qwen/Qwen3-8B", "tp_rank": "0",
					"job": "sglang", "instance": replicaInstance(i)}
				if !shape.sglangPodless {
					sglang["namespace"], sglang["pod"] = "llm", fleet.Replicas()[i]
				}
				in = append(in, series(sglang, 40))
			}
			if r := gpus[0]; shape.joins && uint64(value(reasonsOf(t, r).GetMetric()[0]))&(sim.ThrottleHWSlowdown|sim.ThrottleHWThermal) == 0 {
				t.Fatalf("sim-0 is not throttled at the instant tested: the scenario changed")
			}

			var tests []string
			for _, q := range queries {
				var want []string
				if shape.joins {
					for i, fams := range gpus {
						want = append(want, expected(t, q, fams, i))
					}
				}
				expr := strings.NewReplacer(`"$model"`, `".*"`, `"$instance"`, `".*"`, `"$cluster"`, `".*"`).Replace(q.Expr)
				tests = append(tests, fmt.Sprintf("      - expr: %s\n        eval_time: 2m\n        exp_samples:%s", yamlQuote(expr), samples(want)))
			}
			file := filepath.Join(t.TempDir(), "gpu-panels.test.yaml")
			doc := "rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n" +
				strings.Join(in, "") + "    promql_expr_test:\n" + strings.Join(tests, "\n") + "\n"
			if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput()
			if err != nil {
				t.Errorf("promtool test rules: %v\n%s", err, out)
			}
		})
	}
}

func replicaInstance(i int) string { return fmt.Sprintf("10.0.0.%d:30000", i) }

// reasonBit finds the bit a reasons query shows: floor(reasons / bit) % 2.
var reasonBit = regexp.MustCompile(`\) / (\d+)\) % 2$`)

// expected is the sample query q must give for replica i, whose GPU's
// exposition is fams: the exporter's value under the replica's instance.
func expected(t *testing.T, q Query, fams map[string]*dto.MetricFamily, i int) string {
	t.Helper()
	var f *dto.MetricFamily
	for _, m := range q.Metrics {
		if fams[m] != nil {
			f = fams[m]
		}
	}
	if f == nil || len(f.GetMetric()) != 1 {
		t.Fatalf("%s: node %d exports none of %v", q.Where, i, q.Metrics)
	}
	m := f.GetMetric()[0]
	v := value(m)
	// A reasons panel shows one bit: floor(reasons / bit) % 2.
	if bit := reasonBit.FindStringSubmatch(q.Expr); bit != nil {
		b, _ := strconv.ParseFloat(bit[1], 64)
		v = math.Mod(math.Floor(v/b), 2)
	}
	ls := map[string]string{"instance": replicaInstance(i), "namespace": "llm", "pod": "sim-" + strconv.Itoa(i)}
	for _, l := range m.GetLabel() {
		if slices.Contains([]string{"gpu", "UUID", "Hostname"}, l.GetName()) || l.GetName() == "err_msg" && strings.Contains(q.Expr, "err_msg") {
			ls[l.GetName()] = l.GetValue()
		}
	}
	return fmt.Sprintf("\n          - labels: %s\n            value: %s", yamlQuote(labelSet(ls)), strconv.FormatFloat(v, 'g', -1, 64))
}

func samples(want []string) string {
	if len(want) == 0 {
		return " []"
	}
	return strings.Join(want, "")
}

func reasonsOf(t *testing.T, fams map[string]*dto.MetricFamily) *dto.MetricFamily {
	t.Helper()
	for _, name := range []string{sim.FieldClocksEventReasons, sim.FieldClockThrottleReasons} {
		if f := fams[name]; f != nil {
			return f
		}
	}
	t.Fatal("no clock-event reasons")
	return nil
}

func parse(t *testing.T, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func value(m *dto.Metric) float64 {
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetCounter().GetValue()
}

// series is one promtool input series holding v for the whole test.
func series(ls map[string]string, v float64) string {
	name := ls["__name__"]
	delete(ls, "__name__")
	return fmt.Sprintf("      - series: %s\n        values: '%sx5'\n", yamlQuote(name+labelSet(ls)), strconv.FormatFloat(v, 'g', -1, 64))
}

func labelSet(ls map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(ls)) {
		parts = append(parts, k+"="+strconv.Quote(ls[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// yamlQuote is s as a single-quoted YAML scalar.
func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
