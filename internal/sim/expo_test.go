package sim

import (
	"bytes"
	"math"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const fixturePath = "../../../shared/fixtures/sglang/sglang-current-full.prom"

func parseExposition(t *testing.T, text []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("exposition does not parse: %v", err)
	}
	return fams
}

func loadFixture(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	b, err := os.ReadFile(fixturePath)
	if err != nil {
		t.Skipf("reference fixture not available: %v", err)
	}
	return parseExposition(t, b)
}

func labelNames(f *dto.MetricFamily) []string {
	set := map[string]bool{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			set[l.GetName()] = true
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func bounds(f *dto.MetricFamily) []float64 {
	var b []float64
	for _, bk := range f.GetMetric()[0].GetHistogram().GetBucket() {
		b = append(b, bk.GetUpperBound())
	}
	return b
}

// TestExpositionMatchesFixture renders every replica mid-incident (so every
// family has data) and checks each family against the real capture: same
// type, same HELP, same label names, same histogram buckets.
func TestExpositionMatchesFixture(t *testing.T) {
	fixture := loadFixture(t)
	start := time.Unix(1_700_000_000, 0)
	f := NewFleet(FleetConfig{Seed: 7, Start: start, Scenario: DemoScenario(1), Warmup: 30 * time.Second})
	f.Advance(start.Add(95 * time.Second)) // storm on sim-0, healthy elsewhere

	for i := range f.Replicas() {
		var buf bytes.Buffer
		if err := f.WriteMetrics(&buf, i); err != nil {
			t.Fatal(err)
		}
		got := parseExposition(t, buf.Bytes())
		if len(got) < 40 {
			t.Errorf("replica %d: only %d families", i, len(got))
		}
		for name, fam := range got {
			want, ok := fixture[name]
			if !ok {
				t.Errorf("%s: not in the reference capture", name)
				continue
			}
			if fam.GetType() != want.GetType() {
				t.Errorf("%s: type %v, capture has %v", name, fam.GetType(), want.GetType())
			}
			if fam.GetHelp() != want.GetHelp() {
				t.Errorf("%s: HELP %q, capture has %q", name, fam.GetHelp(), want.GetHelp())
			}
			if g, w := labelNames(fam), labelNames(want); strings.Join(g, ",") != strings.Join(w, ",") {
				t.Errorf("%s: labels %v, capture has %v", name, g, w)
			}
			if fam.GetType() == dto.MetricType_HISTOGRAM {
				if g, w := bounds(fam), bounds(want); !slicesEqual(g, w) {
					t.Errorf("%s: buckets %v, capture has %v", name, g, w)
				}
			}
		}
		for _, name := range requiredFamilies {
			if _, ok := got[name]; !ok {
				t.Errorf("replica %d: family %s missing", i, name)
			}
		}
	}
}

var requiredFamilies = []string{
	"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:full_token_usage",
	"sglang:num_used_tokens", "sglang:max_total_num_tokens", "sglang:kv_available_tokens",
	"sglang:kv_evictable_tokens", "sglang:kv_used_tokens", "sglang:gen_throughput", "sglang:cache_hit_rate",
	"sglang:new_token_ratio", "sglang:num_retracted_reqs", "sglang:num_retracted_requests_total",
	"sglang:num_retracted_input_tokens_total", "sglang:num_retracted_output_tokens_total",
	"sglang:realtime_tokens_total", "sglang:prefill_effective_tokens_total", "sglang:evicted_tokens_total",
	"sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:cached_tokens_total",
	"sglang:num_requests_total", "sglang:num_aborted_requests_total", "sglang:time_to_first_token_seconds",
	"sglang:inter_token_latency_seconds", "sglang:e2e_request_latency_seconds", "sglang:queue_time_seconds",
	"sglang:prompt_tokens_histogram", "sglang:generation_tokens_histogram", "sglang:http_requests_total",
	"sglang:http_responses_total", "sglang:http_requests_active", "sglang:process_cpu_seconds_total",
	"sglang:context_len", "sglang:page_size", "sglang:startup_time_seconds",
}

func slicesEqual(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestExpositionTextDetails pins what a parser would not notice: label
// order, value formatting and the pid quirk, as in the capture.
func TestExpositionTextDetails(t *testing.T) {
	f := NewFleet(FleetConfig{Seed: 1, Start: time.Unix(0, 0), Warmup: 20 * time.Second})
	var buf bytes.Buffer
	if err := f.WriteMetrics(&buf, 0); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{
		`sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen3-8B",moe_ep_rank="0",pp_rank="0",tp_rank="0"} `,
		`sglang:num_retracted_reqs{engine_type="unified",model_name="Qwen/Qwen3-8B",moe_ep_rank="0",pid="11593",pp_rank="0",tp_rank="0"} 0.0`,
		`sglang:time_to_first_token_seconds_bucket{engine_type="unified",is_streaming="true",le="0.1",model_name="Qwen/Qwen3-8B"} `,
		`sglang:prompt_tokens_histogram_bucket{engine_type="unified",le="1e+06",model_name="Qwen/Qwen3-8B"} `,
		`sglang:queue_time_seconds_bucket{engine_type="unified",le="0.0",model_name="Qwen/Qwen3-8B",moe_ep_rank="0",pp_rank="0",tp_rank="0"} `,
		`sglang:cached_tokens_total{cache_source="device",engine_type="unified",model_name="Qwen/Qwen3-8B"} `,
		`sglang:http_requests_total{endpoint="/v1/chat/completions",method="POST"} `,
		`sglang:realtime_tokens_total{engine_type="unified",mode="prefill_cache",model_name="Qwen/Qwen3-8B",moe_ep_rank="0",pp_rank="0",tp_rank="0"} `,
		`sglang:startup_time_seconds{engine_type="unified",model_name="Qwen/Qwen3-8B",phase="load_weight"} `,
		`sglang:max_total_num_tokens{engine_type="unified",model_name="Qwen/Qwen3-8B",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 200000.0`,
		`sglang:page_size{engine_type="unified",model_name="Qwen/Qwen3-8B",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1.0`,
		"# TYPE sglang:inter_token_latency_seconds histogram\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

func TestFormatFloat(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0.0"},
		{7010, "7010.0"},
		{0.41, "0.41"},
		{438720, "438720.0"},
		{11754535, "1.1754535e+07"},
		{1e6, "1e+06"},
		{1.1e6, "1.1e+06"},
		{2.210331e6, "2.210331e+06"},
		{0.0016200000000000001, "0.0016200000000000001"},
		{1e-5, "1e-05"},
		{-3, "-3.0"},
		{math.Inf(1), "+Inf"},
		{math.NaN(), "NaN"},
	} {
		if got := formatFloat(tc.in); got != tc.want {
			t.Errorf("formatFloat(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
