package scrape

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// The filter decides from the exposed name, and must see through every
// spelling of a kept family: the gateway's "sglang_" re-rendering, retired
// names, histogram parts.
func TestKeepFilterSeesThroughExposedNames(t *testing.T) {
	k := newKeepSet([]string{series.NumRunningReqs, series.TTFTSeconds, series.GatewayHTTPRequestsTotal,
		series.InterTokenLatency, "process_start_time_seconds"}).filter()
	for name, want := range map[string]bool{
		series.NumRunningReqs:                               true,
		"sglang_num_running_reqs":                           true, // gateway /engine_metrics
		"sglang:num_requests_running":                       true, // 2024 name
		"sglang_num_requests_running":                       true,
		series.TTFTSeconds + "_bucket":                      true,
		series.TTFTSeconds + "_sum":                         true,
		"sglang_time_to_first_token_seconds_count":          true,
		"sglang:time_per_output_token_seconds_bucket":       true, // legacy ITL histogram
		"sgl_router_http_requests_total":                    true, // legacy gateway
		"process_start_time_seconds":                        true,
		series.TTFTSeconds + "_created":                     false,
		"sglang:prompt_tokens_histogram_bucket":             false,
		"sglang:func_latency_seconds_bucket":                false,
		series.NumQueueReqs:                                 false,
		"sglang:num_running_reqs_bucket":                    true, // a part of a kept family name
		"sglang:num_running":                                false,
		"python_gc_objects_collected_total":                 false,
		"sglang:per_stage_req_latency_seconds_bucket":       false,
		"sglang:time_to_first_token_seconds_bucket_garbage": false,
	} {
		for range 2 { // the second answer comes from the cache
			if got := k.keeps([]byte(name)); got != want {
				t.Errorf("keeps(%q) = %v, want %v", name, got, want)
			}
		}
	}
	if newKeepSet(nil).filter() != nil {
		t.Error("a nil family list must keep everything (no filter)")
	}
}

// keptFamilies is a read set mixing every kind of family: gauges the
// normalizer merges over ranks, counters, histograms, legacy names'
// successors and gateway families.
var keptFamilies = []string{series.NumRunningReqs, series.NumQueueReqs, series.TokenUsage, series.TTFTSeconds,
	series.InterTokenLatency, series.RetractedRequestsTotal, series.CacheHitRateGauge, series.PromptTokensTotal,
	series.GatewayHTTPRequestsTotal, series.GatewayHTTPResponsesTotal, series.GatewayUpstreamResponses}

// inKept reports whether a normalized sample name belongs to a kept family.
func inKept(name string) bool {
	if slices.Contains(keptFamilies, name) {
		return true
	}
	for _, suf := range histogramSuffixes {
		if base, ok := strings.CutSuffix(name, suf); ok && slices.Contains(keptFamilies, base) {
			return true
		}
	}
	return false
}

// Through the real scrape path, filtering at parse time gives exactly what
// keeping everything and then dropping the unread families gives, on every
// captured release: the same series, values, groups, models.
func TestScrapeKeepingFamiliesEqualsFilteringAfterwards(t *testing.T) {
	for _, name := range fixture.Names() {
		t.Run(name, func(t *testing.T) {
			body, err := fixture.SGLang(name)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, body)
			tg := Target{Name: "r", URL: srv.URL + "/metrics", Kind: KindEngine}
			all := ScrapeOnce(context.Background(), client(t), tg, Options{})
			kept := ScrapeOnce(context.Background(), client(t), tg, Options{KeepFamilies: keptFamilies})
			if all.Reason != "" || kept.Reason != "" {
				t.Fatalf("scrape failed: %s %s / %s %s", all.Reason, all.Error, kept.Reason, kept.Error)
			}
			var want []string
			for _, line := range renderGroups(all.Groups) {
				sample := line[strings.LastIndexByte(line, '|')+1:]
				if inKept(sample[:strings.IndexAny(sample, "{ ")]) {
					want = append(want, line)
				}
			}
			got := renderGroups(kept.Groups)
			if len(want) == 0 {
				t.Fatal("nothing kept: the test reads no family of this capture")
			}
			diffLines(t, "kept", got, want)
			if n, m := countSamples(kept.Groups), countSamples(all.Groups); n >= m {
				t.Errorf("kept %d of %d samples: nothing dropped", n, m)
			}
		})
	}
}

func countSamples(gs []series.Group) int {
	n := 0
	for _, g := range gs {
		n += len(g.Samples)
	}
	return n
}

// A keeping parser hands textparse only the lines it has to read: the
// samples of kept families, TYPE lines and anything it cannot name. So a
// broken line of a family no detector reads, or a broken help text, no
// longer fails the scrape; a broken kept line still does, at its line of
// the body; a page that is no exposition at all still fails to parse, so
// the scrape still reports it as not metrics.
func TestKeepingParserReadsOnlyKeptLines(t *testing.T) {
	good := "# HELP sglang:num_running_reqs running\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 3\n"
	for _, tc := range []struct {
		name, body string
		want       []string // rendered samples, or
		err        string   // the error's prefix
	}{
		{name: "broken dropped sample", body: "sglang:func_latency_seconds_bucket{le=\"1\" 2\n" + good,
			want: []string{`sglang:num_running_reqs{model_name="m"} 3`}},
		{name: "broken help text", body: "# HELP sglang:num_running_reqs \"unterminated\n# HELP 3bad x\n" + good,
			want: []string{`sglang:num_running_reqs{model_name="m"} 3`}},
		{name: "broken kept sample", body: good + "sglang:func_latency_seconds 1\nsglang:num_running_reqs{model_name=\"m\" 3\n", err: "line 5:"},
		{name: "kept value not a number", body: "sglang:func_latency_seconds 1\n\n" + good + "sglang:num_running_reqs two\n", err: "line 6:"},
		{name: "HTML page", body: "<!doctype html>\n<html><body>Sign in</body></html>\n", err: "line 1:"},
		{name: "quoted name is read", body: "{\"sglang:num_running_reqs\",model_name=\"m\"} 4\n",
			want: []string{`sglang:num_running_reqs{model_name="m"} 4`}},
		{name: "no trailing newline", body: "sglang:func_latency_seconds 1\nsglang:num_running_reqs 5",
			want: []string{`sglang:num_running_reqs{} 5`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewParser().Parse(nil, []byte(tc.body)); strings.HasPrefix(tc.name, "broken") && err == nil {
				t.Fatal("the parser keeping every family accepts this body, so the case shows nothing")
			}
			raw, err := newTextParser(newKeepSet(fuzzKeep).filter()).Parse(nil, []byte(tc.body))
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("error %v, want one starting %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rs := range raw {
				var ls []string
				for _, l := range rs.Labels {
					ls = append(ls, l.Name+"="+strconv.Quote(l.Value))
				}
				got = append(got, fmt.Sprintf("%s{%s} %v", rs.Name, strings.Join(ls, ","), rs.Value))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("samples %q, want %q", got, tc.want)
			}
		})
	}
}
