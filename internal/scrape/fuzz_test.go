package scrape

import (
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// fuzzKeep is a read set for the filtered parse: a gauge, a counter, a
// histogram, a legacy name's successor and a gateway family.
var fuzzKeep = []string{series.NumRunningReqs, series.RetractedRequestsTotal, series.TTFTSeconds,
	series.NumQueueReqs, series.GatewayHTTPRequestsTotal}

// fuzzMaxSeries bounds normalization as Options.MaxSeries does.
const fuzzMaxSeries = 1000

// FuzzParse feeds arbitrary bodies, seeded with every captured release,
// through the daemon's parse path: textparse, the keep filter and
// normalization. Nothing may panic; a body textparse accepts must split
// into exactly the labels textparse itself builds, and parse the same again
// from the parser's cache of splits; a keeping parser that read a release
// before must read the body as a fresh one does; the filtered parse must
// be the unfiltered one minus the dropped families; normalization must
// produce no more series than samples (bounded output) and fail only with
// the series limit.
func FuzzParse(f *testing.F) {
	for _, name := range fixture.Names() {
		body, err := fixture.SGLang(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(body)
	}
	f.Add([]byte("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n"))
	f.Add([]byte("{\"sglang:num_running_reqs\",\"a.b\"=\"x\\\"y\\\\z\\n\"} 1 123\n"))
	f.Add([]byte("sglang_num_running_reqs { model_name = \"m\" , } NaN\n"))
	warmBody, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// A keeping parser that read a replica's exposition reads the
		// body from its caches where it can, and returns what textparse's
		// path returns, the second time too.
		warm := newTextParser(newKeepSet(fuzzKeep).filter())
		if _, err := warm.Parse(nil, warmBody); err != nil {
			t.Fatal(err)
		}
		sameAsFresh(t, warm, body)
		sameAsFresh(t, warm, body)
		// Normalized by one normalizer three times, its values moved each
		// time, the body read from the cache is normalized by the plan the
		// second read made, and as normalizing it afresh does.
		norm := newScrapeNormalizer()
		rng := rand.New(rand.NewPCG(uint64(len(body)), 1))
		for range 3 {
			raw, err := warm.Parse(nil, withValues(body, rng))
			if err != nil {
				break
			}
			got, gotErr := norm.normalizeParsed(raw, fuzzMaxSeries, warm)
			want, wantErr := newNormalizer().normalize(raw, fuzzMaxSeries)
			if !errors.Is(gotErr, wantErr) {
				t.Fatalf("normalized with the plan: %v, afresh: %v", gotErr, wantErr)
			}
			if g, w := renderGroupsInOrder(got), renderGroupsInOrder(want); !slices.Equal(g, w) {
				t.Fatalf("normalized with the plan:\n%s\nafresh:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
			}
		}

		p := NewParser()
		all, err := p.Parse(nil, body)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		checkAgainstTextparse(t, body, all)
		// The same body again: every series comes from the split cache.
		first := renderRaw(all)
		if all, err = p.Parse(nil, body); err != nil {
			t.Fatalf("a second parse failed where the first did not: %v", err)
		}
		if again := renderRaw(all); !slices.Equal(again, first) {
			t.Fatalf("second parse, from the cache:\n%v\nfirst:\n%v", again, first)
		}

		keep := newKeepSet(fuzzKeep).filter()
		kept, err := newTextParser(newKeepSet(fuzzKeep).filter()).Parse(nil, body)
		if err != nil {
			t.Fatalf("the filtered parse failed where the full one did not: %v", err)
		}
		var want []RawSample
		for _, rs := range all {
			if keep.keeps([]byte(rs.Name)) {
				want = append(want, rs)
			}
		}
		if !slices.Equal(renderRaw(kept), renderRaw(want)) {
			t.Fatalf("filtered parse:\n%v\nwant the unfiltered one's kept samples:\n%v", renderRaw(kept), renderRaw(want))
		}

		groups, err := newNormalizer().normalize(all, fuzzMaxSeries)
		if err != nil {
			if !errors.Is(err, errTooManySeries) || len(all) <= fuzzMaxSeries {
				t.Fatalf("normalize of %d samples: %v", len(all), err)
			}
			return
		}
		if n := countSamples(groups); n > len(all) {
			t.Fatalf("%d series normalized from %d samples", n, len(all))
		}
	})
}

// checkAgainstTextparse compares the parse with textparse's own Labels for
// every series: same names, same label pairs (bucket bounds and quantiles
// compared after both parsers' float normalization), same order of samples.
func checkAgainstTextparse(t *testing.T, body []byte, got []RawSample) {
	t.Helper()
	tp := textparse.NewPromParser(body, labels.NewSymbolTable(), false)
	var ls labels.Labels
	i := 0
	for {
		entry, err := tp.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("textparse fails where the parser did not: %v", err)
		}
		if entry != textparse.EntrySeries {
			continue
		}
		tp.Labels(&ls)
		if i >= len(got) {
			t.Fatalf("textparse has more samples than the parser's %d", len(got))
		}
		rs := got[i]
		i++
		if name := ls.Get(model.MetricNameLabel); name != rs.Name {
			t.Fatalf("sample %d: name %q, textparse %q", i, rs.Name, name)
		}
		var want []series.Label
		ls.Range(func(l labels.Label) {
			if l.Name != model.MetricNameLabel {
				want = append(want, series.Label{Name: l.Name, Value: l.Value})
			}
		})
		have := slices.Clone(rs.Labels)
		sortLabels(have)
		if len(have) != len(want) {
			t.Fatalf("sample %d (%s): labels %v, textparse %v", i, rs.Name, have, want)
		}
		for k := range have {
			if have[k].Name != want[k].Name {
				t.Fatalf("sample %d (%s): labels %v, textparse %v", i, rs.Name, have, want)
			}
			if have[k].Value != want[k].Value && !isBound(have[k].Name) {
				t.Fatalf("sample %d (%s): labels %v, textparse %v", i, rs.Name, have, want)
			}
		}
	}
	if i != len(got) {
		t.Fatalf("the parser returned %d samples, textparse %d", len(got), i)
	}
}

func isBound(label string) bool { return label == "le" || label == "quantile" }
