package window

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Thinning old histograms (Options.HistogramFullResolution) leaves the
// ranges detectors compare now as they were and starts an hour-long
// baseline up to a minute late: over the full exposition moving as a busy
// server's does, at production retention, every quantile, mean and
// observation count over a current range is the one without thinning;
// every baseline quantile is the one without thinning over the same range
// started at one of its first minute's scrapes, and every baseline's
// increases of _sum and _count are both those of one such start, so a
// mean is still that of one span.
func TestThinnedHistogramsKeepBaselines(t *testing.T) {
	seq := movingSequence(t)
	full := productionOptions()
	full.HistogramFullResolution = -1
	thinned, kept := newTestStore(t, productionOptions()), newTestStore(t, full)
	var now time.Time
	for i, samples := range seq {
		now = t0.Add(time.Duration(i) * full.ScrapeInterval)
		mustAppend(t, thinned, okScrape("r", now, samples...))
		mustAppend(t, kept, okScrape("r", now, samples...))
	}
	hists := map[string]bool{}
	for _, s := range seq[len(seq)-1] {
		if h, ok := strings.CutSuffix(s.Name, "_bucket"); ok {
			hists[h] = true
		}
	}
	type span struct {
		from, to time.Time
		baseline bool
	}
	spans := []span{
		{now.Add(-time.Minute), now, false},
		{now.Add(-5 * time.Minute), now, false},
		{now.Add(-61 * time.Minute), now.Add(-time.Minute), true},
		{now.Add(-65 * time.Minute), now.Add(-5 * time.Minute), true},
	}
	perMinute := int(time.Minute / full.ScrapeInterval)
	var worst float64
	compared := 0
	withView(t, thinned, "r", func(tw detect.Window) {
		withView(t, kept, "r", func(kw detect.Window) {
			for h := range hists {
				for _, sp := range spans {
					for _, q := range []float64{0.5, 0.9, 0.99} {
						got, gok := tw.Quantile(q, h, nil, sp.from, sp.to)
						want, wok := kw.Quantile(q, h, nil, sp.from, sp.to)
						if gok != wok {
							t.Fatalf("Quantile(%v, %s, %s..%s): ok %v thinned, %v not", q, h, sp.from, sp.to, gok, wok)
						}
						if !gok {
							continue
						}
						compared++
						if !sp.baseline {
							if got != want {
								t.Errorf("Quantile(%v, %s) over the last %s = %v thinned, %v not: a current range must read every scrape", q, h, sp.to.Sub(sp.from), got, want)
							}
							continue
						}
						worst = max(worst, math.Abs(got-want)/math.Max(math.Abs(want), 1e-9))
						late := -1
						for j := range perMinute {
							from := sp.from.Add(time.Duration(j) * full.ScrapeInterval)
							if w, ok := kw.Quantile(q, h, nil, from, sp.to); ok && w == got {
								late = j
								break
							}
						}
						if late < 0 {
							t.Errorf("baseline Quantile(%v, %s, %s..%s) = %v thinned, %v not, and no start within the first minute gives it", q, h, sp.from, sp.to, got, want)
						}
					}
					sum, count := detect.Sel(h+"_sum"), detect.Sel(h+"_count")
					gotS, okS := tw.Increase(sum, sp.from, sp.to)
					gotC, okC := tw.Increase(count, sp.from, sp.to)
					if !okS || !okC {
						t.Fatalf("%s: no _sum or _count increase over %s..%s", h, sp.from, sp.to)
					}
					compared++
					late := -1
					for j := range perMinute {
						from := sp.from.Add(time.Duration(j) * full.ScrapeInterval)
						if !sp.baseline && j > 0 {
							break
						}
						wantS, _ := kw.Increase(sum, from, sp.to)
						wantC, _ := kw.Increase(count, from, sp.to)
						if gotS == wantS && gotC == wantC {
							late = j
							break
						}
					}
					if late < 0 {
						t.Errorf("%s over %s..%s: _sum, _count increases %v, %v thinned, and no start within the first minute gives both (baseline %v)", h, sp.from, sp.to, gotS, gotC, sp.baseline)
					}
					if sp.baseline {
						thinnedSum := false
						withRec(thinned, h+"_sum", func(rec *seriesRec) { thinnedSum = thinnedSum || rec.pts.sealed[0].run.thinned() })
						if !thinnedSum {
							t.Errorf("%s_sum was not thinned", h)
						}
					}
				}
			}
		})
	})
	if compared == 0 {
		t.Fatal("no quantile compared")
	}
	tb, kb := thinned.replicas["r"].bytes, kept.replicas["r"].bytes
	if tb >= kb {
		t.Errorf("thinned window %d bytes, not below %d", tb, kb)
	}
	t.Logf("%d quantiles and means compared, baselines at most %.1f%% from the whole range's; window %d bytes thinned, %d not (%.0f%%)", compared, 100*worst, tb, kb, 100*float64(tb)/float64(kb))
}

// Thinned chunks are merged up to maxThinnedSpan scrapes, so an hour of a
// bucket is a few thinned chunks, not one per sealed chunk; a counter that
// keeps a point at every scrape (it drops at every other one) is not
// merged into a chunk it would overflow, and loses nothing.
func TestThinnedChunksMerge(t *testing.T) {
	const slot, scrapes = 12, 12 * samplesPerChunk
	for _, c := range []struct {
		name  string
		value func(seq uint64) float64
		// most thinned chunks wanted at the end
		most int
	}{
		{"a steady bucket", func(seq uint64) float64 { return float64(seq * 7) }, (scrapes+maxThinnedSpan-1)/maxThinnedSpan + 1},
		{"a sawtooth", func(seq uint64) float64 { return float64(seq % 2) }, scrapes / samplesPerChunk},
	} {
		t.Run(c.name, func(t *testing.T) {
			var p points
			var buf []float64
			for seq := range uint64(scrapes + 1) {
				p.put(seq, c.value(seq), nil)
				if seq > 3*samplesPerChunk/2 {
					_, buf = p.thinBefore(seq-3*samplesPerChunk/2, slot, buf, nil)
				}
			}
			thinned := 0
			for k, ch := range p.sealed {
				if !ch.run.thinned() {
					continue
				}
				thinned++
				if span := p.sealedEnd(k) - ch.first; span > maxThinnedSpan {
					t.Errorf("thinned chunk %d spans %d scrapes, more than %d", k, span, maxThinnedSpan)
				}
			}
			if thinned == 0 || thinned > c.most {
				t.Errorf("%d thinned chunks, want 1 to %d", thinned, c.most)
			}
			var d decoder
			vals := d.values(&p, 0, scrapes+1)
			for seq, v := range vals {
				want := c.value(uint64(seq))
				switch {
				case finite(v) && v != want:
					t.Fatalf("seq %d reads %v, want %v", seq, v, want)
				case !finite(v) && (seq%slot == 0 || c.name == "a sawtooth"):
					t.Fatalf("seq %d, the first of its slot or beside a drop, was dropped", seq)
				}
			}
		})
	}
}

// withRec calls fn with every series of the family in replica "r".
func withRec(s *Store, family string, fn func(*seriesRec)) {
	for _, rec := range s.replicas["r"].families[family] {
		fn(rec)
	}
}

// A _sum or _count is thinned with its histogram's buckets however the
// exposition orders them, and not when the replica exposes no buckets of
// that family (a summary, or a gauge SGLang names *_count).
func TestHistogramSumAndCountThinWithTheirBuckets(t *testing.T) {
	opts := productionOptions()
	s := newTestStore(t, opts)
	for i := range 30 * 12 { // 30 minutes at 5 s
		v := float64(i * 3)
		mustAppend(t, s, okScrape("r", t0.Add(time.Duration(i)*opts.ScrapeInterval),
			smp("h_sum", v/7), smp("h_count", v), // before the buckets
			smp("h_bucket", v, "le", "+Inf"),
			smp("summary_sum", v/7), smp("summary_count", v),
			smp("routing_key_all_req_count", v),
			smp("c_total", v)))
	}
	for family, want := range map[string]bool{
		"h_sum": true, "h_count": true, "h_bucket": true,
		"summary_sum": false, "summary_count": false, "routing_key_all_req_count": false, "c_total": false,
	} {
		thinned := false
		withRec(s, family, func(rec *seriesRec) {
			for _, c := range rec.pts.sealed {
				thinned = thinned || c.run.thinned()
			}
		})
		if thinned != want {
			t.Errorf("%s thinned: %v, want %v", family, thinned, want)
		}
	}
}

// A thinned integer chunk that never drops is fed to counterRuns from its
// first sample in a range and its summary (intSteps), which must give what
// stepping through every sample gives: the increase, the first and last
// seqs and the count of samples, for every range over the chunk, prior
// runs included.
func TestIntStepsOfRisingChunkMatchStepping(t *testing.T) {
	const slot = 12
	var p points
	var buf []float64
	for seq := range uint64(4 * samplesPerChunk) {
		p.put(seq, float64(seq*seq/7), nil) // rising, with changing steps
		if seq > 2*samplesPerChunk {
			_, buf = p.thinBefore(seq-samplesPerChunk, slot, buf, nil)
		}
	}
	if len(p.sealed) == 0 || !p.sealed[0].run.thinned() || !p.sealed[0].run.enc.ints() || p.sealed[0].run.broken() {
		t.Fatal("no rising thinned integer chunk to read")
	}
	ch := p.sealed[0]
	broken := ch
	broken.run.flags |= runBroken // stepped through sample by sample
	r := newReplica("r", "r", "engine", &labelSets{})
	first, end := ch.first, p.sealedEnd(0)
	compared := 0
	for lo := first; lo <= end; lo++ {
		for hi := lo; hi <= end+1; hi++ {
			for _, prior := range []float64{math.NaN(), 0, 1e9} {
				got, want := counterRuns{r: r}, counterRuns{r: r}
				if !math.IsNaN(prior) { // a run before the chunk, which may drop into it
					got.step(0, prior)
					want.step(0, prior)
				}
				got.intSteps(&ch, lo, min(hi, end))
				want.intSteps(&broken, lo, min(hi, end))
				if got.finish() != want.finish() || got.first != want.first || got.last != want.last || got.n != want.n || got.partial != want.partial {
					t.Fatalf("[%d, %d) after %v: inc %v first %d last %d n %d partial %d, stepping gives %v %d %d %d %d",
						lo, hi, prior, got.finish(), got.first, got.last, got.n, got.partial, want.finish(), want.first, want.last, want.n, want.partial)
				}
				compared++
			}
		}
	}
	t.Logf("%d ranges compared over a thinned chunk of %d samples spanning %d scrapes", compared, ch.run.n, end-first)
}
