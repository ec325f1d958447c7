package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// renderGroupsInOrder renders normalized groups in their order, values
// bit-exact.
func renderGroupsInOrder(groups []series.Group) []string {
	var out []string
	for _, g := range groups {
		out = append(out, fmt.Sprintf("group worker=%q model=%q engine_type=%q", g.Worker, g.Model, g.EngineType))
		for _, s := range g.Samples {
			out = append(out, sampleLine(s.Name, s.Labels, s.Value))
		}
	}
	return out
}

// planValues are the values withValues writes: numbers above and below 1
// (a percent hit rate is divided by 100 above 1), equal ones (copies take
// the max), and every kind of non-finite one (max prefers a number to NaN).
var planValues = []string{"0", "1", "0.75", "2.5", "37", "150", "1e300", "-1", "-0", "NaN", "+Inf", "-Inf"}

// withValues is body with the value of every sample line drawn from
// planValues, the series texts as they are.
func withValues(body []byte, rng *rand.Rand) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(body) {
		text := bytes.TrimRight(line, "\n")
		i := bytes.LastIndexByte(text, ' ')
		if len(text) == 0 || text[0] == '#' || i < 0 {
			out.Write(line)
			continue
		}
		out.Write(text[:i+1])
		out.WriteString(planValues[rng.IntN(len(planValues))])
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// familiesOf are the canonical families of body's series, so that a
// keeping parser keeps all of them.
func familiesOf(t *testing.T, body []byte) []string {
	t.Helper()
	raw, err := NewParser().Parse(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := newNormalizer().normalize(raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range groups {
		for _, s := range g.Samples {
			out = append(out, s.Name)
			for _, suf := range histogramSuffixes {
				if base, ok := strings.CutSuffix(s.Name, suf); ok {
					out = append(out, base)
				}
			}
		}
	}
	return out
}

// A scrape of the series the last one had, in the same order, is
// normalized by the recorded plan, and the plan gives what normalizing
// afresh gives, bit for bit: for every captured release and every shape
// normalization combines (copies across TP ranks and pids, DP ranks summed
// or maxed, percent hit rates, legacy and transition names, priority
// totals and breakdowns, gateway workers, two models), with values that
// move through numbers, equal copies and non-finite values; and so is a
// scrape whose series differ from the plan's only in the process ids and
// TP ranks normalize drops, as one replica's differ from another's. A
// scrape of other series is normalized afresh and makes the next plan.
func TestPlannedNormalizationIsNormalization(t *testing.T) {
	bodies := map[string][]byte{}
	for _, name := range fixture.Names() {
		body, err := fixture.SGLang(name)
		if err != nil {
			t.Fatal(err)
		}
		bodies[name] = body
	}
	for name, text := range map[string]string{
		"dp2tp2": dp2tp2, "pid gauges": pidGauges, "gateway": gatewayEngineMetrics, "legacy router": legacyRouter,
		"transition router": transitionRouter, "prototype": prototype, "renamed": renamed, "non-finite": nonFinite,
		"priority scheduling": priorityScheduling, "two models": twoModels,
		// As many series as two models', other label values of the same
		// lengths: not its plan...
		"two models renamed": strings.ReplaceAll(twoModels, `"big"`, `"huge"`),
		// ... or its label names.
		"two models (other label)": strings.ReplaceAll(twoModels, "model_name", "model_nick"),
		// Other processes and TP ranks wrote the same series: its plan,
		// another model's are not.
		"pid gauges (other pids)": strings.NewReplacer(`pid="1159`, `pid="2159`, `tp_rank="1"`, `tp_rank="7"`).Replace(pidGauges),
		"pid gauges, other model": strings.ReplaceAll(pidGauges, `model_name="m"`, `model_name="n"`),
		// Series without labels, as many, other names.
		"no labels":       "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n",
		"no labels other": "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 1\n",
	} {
		bodies[name] = []byte(text)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// One parser and one normalizer read every body in turn, as a pooled
	// scraper reads whichever target is due.
	all := bytes.Join(slices.Collect(maps.Values(bodies)), nil)
	p := newTextParser(newKeepSet(familiesOf(t, all)).filter())
	n := newScrapeNormalizer()
	var raw []RawSample
	check := func(t *testing.T, round int, body []byte, wantPlanned bool) {
		t.Helper()
		var err error
		if raw, err = p.Parse(raw[:0], withValues(body, rng)); err != nil {
			t.Fatal(err)
		}
		planned := n.plan.matches(raw, 0)
		if planned != wantPlanned {
			t.Fatalf("round %d: plan applied %v, want %v (read from the cache: %v)", round, planned, wantPlanned, p.fromCache)
		}
		got, err := n.normalizeParsed(raw, 0, p)
		if err != nil {
			t.Fatal(err)
		}
		want, err := newNormalizer().normalize(raw, 0)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := renderGroupsInOrder(got), renderGroupsInOrder(want); !slices.Equal(g, w) {
			t.Fatalf("round %d (plan applied: %v):\n%s\nwant, normalized afresh:\n%s", round, planned, strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
	}
	names := slices.Sorted(maps.Keys(bodies))
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			// The first read of a body is textparse's, the second from
			// the cache records the plan, and the later ones apply it;
			// the body read just before has the plan of one.
			for round := range 5 {
				check(t, round, bodies[name], round > 1 || name == "pid gauges (other pids)")
			}
		})
	}
	// Every body in turn, each read from the cache: none is the series
	// of the one before, though some have as many, with the same names or
	// labels of the same lengths, but for one that differs from the one
	// before only in its process ids and TP ranks.
	t.Run("in turn", func(t *testing.T) {
		for round := range 3 {
			for _, name := range names {
				check(t, round, bodies[name], name == "pid gauges (other pids)")
			}
		}
	})
}

// A plan made without a series limit is not applied under one: the scrape
// is normalized afresh and refused as normalize refuses it.
func TestPlanKeepsTheSeriesLimit(t *testing.T) {
	p := newTextParser(newKeepSet(familiesOf(t, []byte(dp2tp2))).filter())
	n := newScrapeNormalizer()
	var raw []RawSample
	for range 3 {
		var err error
		if raw, err = p.Parse(raw[:0], []byte(dp2tp2)); err != nil {
			t.Fatal(err)
		}
		if _, err := n.normalizeParsed(raw, 0, p); err != nil {
			t.Fatal(err)
		}
	}
	if !p.fromCache || !n.plan.matches(raw, 0) {
		t.Fatal("want a plan made without a limit")
	}
	if _, err := n.normalizeParsed(raw, 2, p); !errors.Is(err, errTooManySeries) {
		t.Fatalf("with a limit of 2 series: %v, want errTooManySeries", err)
	}
}
