package sim

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
)

// tokenizerFamilies are the families the tokenizer (request metrics)
// writes: labelled by model_name only in ReleaseSep2025.
var tokenizerFamilies = []string{
	"sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds", "sglang:e2e_request_latency_seconds",
	"sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:cached_tokens_total",
	"sglang:num_requests_total", "sglang:num_aborted_requests_total",
}

// total is a family's value summed over its series: counter and gauge
// values, histogram observation counts.
func total(f *dto.MetricFamily) float64 {
	v := 0.0
	for _, m := range f.GetMetric() {
		v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	return v
}

// The September 2025 release renders the same engine as the current one
// with that release's families, labels and buckets: no retraction
// counters (the lossy gauge only), nothing dated after it, one series per
// tokenizer family, and the same numbers.
func TestReleaseSep2025Exposition(t *testing.T) {
	render := func(rel Release) map[string]*dto.MetricFamily {
		f := NewFleet(FleetConfig{Seed: 7, Start: t0, Scenario: DemoScenario(1), Warmup: 30 * time.Second, Release: rel})
		f.Advance(t0.Add(95 * time.Second)) // sim-0 in its storm
		var buf bytes.Buffer
		if err := f.WriteMetrics(&buf, 0); err != nil {
			t.Fatal(err)
		}
		return parseExposition(t, buf.Bytes())
	}
	cur, old := render(ReleaseCurrent), render(ReleaseSep2025)
	if total(cur["sglang:num_retracted_requests_total"]) == 0 {
		t.Fatal("no retractions in the storm: this test needs some")
	}
	for name := range families {
		_, has := old[name]
		if absentSep2025[name] == has {
			t.Errorf("%s: exposed %v, want %v", name, has, !absentSep2025[name])
		}
	}
	for name, f := range old {
		if f.GetType() != cur[name].GetType() {
			t.Errorf("%s: type %v, the current release has %v", name, f.GetType(), cur[name].GetType())
		}
	}
	for _, name := range tokenizerFamilies {
		if got := labelNames(old[name]); !slices.Equal(got, []string{"model_name"}) {
			t.Errorf("%s: labels %v, want model_name only", name, got)
		}
		if a, b := total(old[name]), total(cur[name]); a != b {
			t.Errorf("%s: %v, the current release's series add up to %v", name, a, b)
		}
	}
	if got := labelNames(old["sglang:num_running_reqs"]); !slices.Equal(got, []string{"engine_type", "model_name", "pp_rank", "tp_rank"}) {
		t.Errorf("scheduler labels %v, want no moe_ep_rank", got)
	}
	if got := labelNames(old["sglang:num_retracted_reqs"]); !slices.Contains(got, "pid") {
		t.Errorf("sglang:num_retracted_reqs labels %v, want the pid of prometheus_client's mode all", got)
	}
	// Queue time: the release's bounds, the same cumulative counts at each.
	qo, qc := old["sglang:queue_time_seconds"].GetMetric()[0].GetHistogram(), cur["sglang:queue_time_seconds"].GetMetric()[0].GetHistogram()
	want := slices.DeleteFunc(slices.Clone(queueTimeBuckets), func(b float64) bool { return b == 0.001 || b == 0.005 || b == 0.01 || b == 0.05 })
	want = append(want, math.Inf(1))
	var got []float64
	for _, b := range qo.GetBucket() {
		got = append(got, b.GetUpperBound())
		i := slices.IndexFunc(qc.GetBucket(), func(c *dto.Bucket) bool { return c.GetUpperBound() == b.GetUpperBound() })
		if i < 0 || qc.GetBucket()[i].GetCumulativeCount() != b.GetCumulativeCount() {
			t.Errorf("queue time le=%v: %d, want the current release's count", b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	if !slices.Equal(got, want) || qo.GetSampleCount() != qc.GetSampleCount() {
		t.Errorf("queue time bounds %v (count %d), want %v (count %d)", got, qo.GetSampleCount(), want, qc.GetSampleCount())
	}
	// The tokenizer families a mid-2025 capture has: same labels, same HELP.
	raw, err := fixture.SGLang("pr7944-2025-07-pd-kv-transfer.prom")
	if err != nil {
		t.Fatal(err)
	}
	capture := parseExposition(t, raw)
	for _, name := range tokenizerFamilies {
		c, ok := capture[name]
		if !ok {
			continue
		}
		if got, want := labelNames(old[name]), labelNames(c); !slices.Equal(got, want) {
			t.Errorf("%s: labels %v, the capture has %v", name, got, want)
		}
		if c.GetHelp() != "" && old[name].GetHelp() != c.GetHelp() {
			t.Errorf("%s: HELP %q, the capture has %q", name, old[name].GetHelp(), c.GetHelp())
		}
	}
}
