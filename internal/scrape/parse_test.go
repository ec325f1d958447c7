package scrape

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// renderRaw renders raw samples one per line, sorted, labels in name order
// (expfmt puts le last, textparse keeps the exposition's order; neither
// order means anything), values bit-exact (NaN, ±Inf and -0 included), so
// two parsers compare as text.
func renderRaw(raw []RawSample) []string {
	out := make([]string, 0, len(raw))
	for _, rs := range raw {
		ls := slices.Clone(rs.Labels)
		sortLabels(ls)
		out = append(out, sampleLine(rs.Name, ls, rs.Value))
	}
	slices.Sort(out)
	return out
}

// sampleLine renders one sample, its value bit-exact.
func sampleLine(name string, ls []series.Label, v float64) string {
	return fmt.Sprintf("%s%s %016x", name, series.Labels(ls), math.Float64bits(v))
}

// renderGroups renders normalized groups the same way.
func renderGroups(groups []series.Group) []string {
	var out []string
	for _, g := range groups {
		for _, s := range g.Samples {
			out = append(out, fmt.Sprintf("%s|%s|%s|%s%s %016x", g.Worker, g.Model, g.EngineType, s.Name, s.Labels, math.Float64bits(s.Value)))
		}
	}
	slices.Sort(out)
	return out
}

// Every captured SGLang release parses to the same samples through
// textparse as through expfmt, and normalizes to the same series.
func TestTextparseMatchesExpfmtOnEveryFixture(t *testing.T) {
	for _, name := range fixture.Names() {
		t.Run(name, func(t *testing.T) {
			body, err := fixture.SGLang(name)
			if err != nil {
				t.Fatal(err)
			}
			want, err := newExpfmtParser().Parse(nil, body)
			if err != nil {
				t.Fatalf("expfmt: %v", err)
			}
			got, err := NewParser().Parse(nil, body)
			if err != nil {
				t.Fatalf("textparse: %v", err)
			}
			if len(got) == 0 {
				t.Fatal("no samples")
			}
			diffLines(t, "raw", renderRaw(got), renderRaw(want))
			wantG, err := newNormalizer().normalize(want, 0)
			if err != nil {
				t.Fatal(err)
			}
			gotG, err := newNormalizer().normalize(got, 0)
			if err != nil {
				t.Fatal(err)
			}
			diffLines(t, "normalized", renderGroups(gotG), renderGroups(wantG))
		})
	}
}

func diffLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	missing, extra := setDiff(want, got), setDiff(got, want)
	t.Errorf("%s: %d lines, want %d\nmissing:\n%s\nextra:\n%s", what, len(got), len(want),
		strings.Join(missing[:min(len(missing), 10)], "\n"), strings.Join(extra[:min(len(extra), 10)], "\n"))
}

func setDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if _, found := slices.BinarySearch(b, x); !found {
			out = append(out, x)
		}
	}
	return out
}

// The cases the two parsers must agree on beyond the captures: escapes,
// blanks between tokens, bounds written in every float spelling, NaN and
// infinities, a summary, a gauge carrying le.
func TestTextparseMatchesExpfmtOnEdgeCases(t *testing.T) {
	body := `# TYPE sglang:x_seconds histogram
sglang:x_seconds_bucket{le="1"} 1
sglang:x_seconds_bucket{le="2.50"} 2
sglang:x_seconds_bucket{le="1e3"} 3
sglang:x_seconds_bucket{le="+Inf"} 4
sglang:x_seconds_sum 5.5
sglang:x_seconds_count 4
# TYPE sglang:q summary
sglang:q{quantile="0.5"} NaN
sglang:q{quantile="0.99"} +Inf
sglang:q_sum -Inf
sglang:q_count 3
# TYPE sglang:routing_key_running_req_count gauge
sglang:routing_key_running_req_count{gt="200",le="+Inf"} 0
sglang:routing_key_running_req_count{gt="10",le="20"} 1
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs { model_name = "a \"quoted\" \\ path\nx" , engine_type="unified", } 7
sglang:num_queue_reqs{model_name="m"} 1e-7
`
	want, err := newExpfmtParser().Parse(nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got, err := NewParser().Parse(nil, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	diffLines(t, "raw", renderRaw(got), renderRaw(want))
}

// A parse error names the line, and a NUL byte (which textparse's lexer
// would take for the end of input) is an error, not a truncated scrape.
func TestTextparseErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"# TYPE a gauge\n\na 1\nb{x=1} 2\n", "line 4:"},
		{"a 1\nb 2\x00\nc 3\n", "line 2: NUL byte"},
		{"a 1\n\n\nb two\n", "line 4:"},
	} {
		_, err := NewParser().Parse(nil, []byte(tc.body))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want prefix %q", tc.body, err, tc.want)
		}
	}
}

// A parser reused across scrapes returns the same samples each time (the
// arena and the intern table are reset correctly).
func TestTextparseReuse(t *testing.T) {
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	p := NewParser()
	first, err := p.Parse(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	want := renderRaw(first)
	var raw []RawSample
	for range 3 {
		if raw, err = p.Parse(raw[:0], body); err != nil {
			t.Fatal(err)
		}
		diffLines(t, "reparse", renderRaw(raw), want)
	}
}

// A series text is cached with the TYPE line it was split under: the same
// text is a gauge's (le kept as written) in one body and a histogram's
// bucket (le rendered canonically) in the next, and a parser that saw
// both, in any order, splits each body as a fresh parser does.
func TestTextparseCachedSplitFollowsTypeLine(t *testing.T) {
	gauge := []byte("# TYPE h gauge\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"1e0\",x=\"y\"} 2\n")
	histogram := []byte("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"1e0\",x=\"y\"} 2\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n")
	untyped := []byte("h_bucket{le=\"1\"} 1\nh_bucket{le=\"1e0\",x=\"y\"} 2\n")
	fresh := func(body []byte) []string {
		raw, err := NewParser().Parse(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		return renderRaw(raw)
	}
	if slices.Equal(fresh(gauge), fresh(histogram)[:2]) {
		t.Fatalf("the gauge and the histogram split alike, so this test shows nothing: %v", fresh(gauge))
	}
	p := NewParser()
	for i, body := range [][]byte{gauge, histogram, untyped, gauge, histogram, histogram, untyped} {
		raw, err := p.Parse(nil, body)
		if err != nil {
			t.Fatal(err)
		}
		diffLines(t, fmt.Sprintf("parse %d", i), renderRaw(raw), fresh(body))
	}
}

// A kept sample's split is cached, a dropped one's too: a filtered parser
// gives the same samples on every scrape, and a warmed one allocates
// nothing per sample.
func TestTextparseCachedSplitsAllocateNothing(t *testing.T) {
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	p := newTextParser(newKeepSet(fuzzKeep).filter())
	first, err := p.Parse(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	want := renderRaw(first)
	raw := make([]RawSample, 0, len(first))
	allocs := testing.AllocsPerRun(5, func() {
		if raw, err = p.Parse(raw[:0], body); err != nil {
			t.Fatal(err)
		}
	})
	diffLines(t, "cached parse", renderRaw(raw), want)
	// textparse's parser itself is a few allocations per body.
	if allocs > 10 {
		t.Errorf("a warmed parse of %d lines allocates %.0f times, want a handful", bytes.Count(body, []byte("\n")), allocs)
	}
}
