package window

import (
	"hash/maphash"
	"slices"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// The buckets of a histogram that hold the same samples (here the bucket
// above every observation, +Inf, and _count) share their sealed and
// thinned chunks' bytes: the first in the exposition carries them, the
// others only their entries, and every series still reads its own values.
// A series with other values shares nothing, nor does a counter with the
// same values that is not thinned, and a series that missed a scrape stops
// sharing once its chunks start at other seqs. Retention, sealing and
// thinning keep each series' accounting equal to what it holds.
func TestEqualChunksShareBytes(t *testing.T) {
	opts := Options{Retention: 25 * time.Minute, ScrapeInterval: 5 * time.Second, HistogramFullResolution: 12 * time.Minute}
	s := newTestStore(t, opts)
	const scrapes = 90 * 12 // past retention: chunks sealed, thinned and dropped
	var now time.Time
	for i := range scrapes {
		now = t0.Add(time.Duration(i) * opts.ScrapeInterval)
		v := float64(i * (3 + i%4)) // rising with changing steps
		samples := append(bucketSamples(v, i), smp("h_sum", v/8), smp("h_count", v), smp("c_total", 2*v), smp("z_total", v))
		mustAppend(t, s, okScrape("r", now, samples...))
	}
	rec := func(family string, le string) *seriesRec {
		for _, r := range s.replicas["r"].families[family] {
			if le == "" || (r.hasLE && r.set.labels[0].Value == le) {
				return r
			}
		}
		t.Fatalf("no series %s{le=%q}", family, le)
		return nil
	}
	maker, inf, count := rec("h_bucket", "10"), rec("h_bucket", "+Inf"), rec("h_count", "")
	gapped := rec("h_bucket", "20")
	if len(maker.pts.sealed) < 2 || !maker.pts.sealed[0].run.thinned() || maker.pts.sealed[len(maker.pts.sealed)-1].run.thinned() {
		t.Fatalf("want thinned and full-resolution chunks held, got %d chunks", len(maker.pts.sealed))
	}
	if maker.pts.sealed[0].first == 0 {
		t.Fatal("retention dropped no chunk")
	}
	for _, sharer := range []*seriesRec{inf, count} {
		if len(sharer.pts.sealed) != len(maker.pts.sealed) {
			t.Fatalf("%s: %d chunks, the bucket before it %d", sharer.name, len(sharer.pts.sealed), len(maker.pts.sealed))
		}
		for k := range maker.pts.sealed {
			m, c := &maker.pts.sealed[k], &sharer.pts.sealed[k]
			if m.data != c.data {
				t.Errorf("%s chunk %d (thinned %v): own bytes, want the equal chunk's of le=10", sharer.name, k, c.run.thinned())
			}
			if m.ownBytes() == 0 || c.ownBytes() != 0 {
				t.Errorf("chunk %d: accounted %d bytes to le=10 and %d to %s, want all to le=10", k, m.ownBytes(), c.ownBytes(), sharer.name)
			}
		}
	}
	for _, own := range []*seriesRec{rec("c_total", ""), rec("z_total", "")} {
		for k := range own.pts.sealed {
			if c := &own.pts.sealed[k]; c.ownBytes() == 0 || slices.ContainsFunc(maker.pts.sealed, func(m sealedChunk) bool { return m.data == c.data }) {
				t.Errorf("%s chunk %d shares bytes with a bucket", own.name, k)
			}
		}
	}
	if g := gapped.pts.sealed[len(gapped.pts.sealed)-1]; g.first == maker.pts.sealed[len(maker.pts.sealed)-1].first || g.ownBytes() == 0 {
		t.Errorf("the bucket that missed a scrape still shares its newest chunk (first %d)", g.first)
	}
	for _, r := range s.replicas["r"].series {
		for ; r != nil; r = r.next {
			if got, want := r.pts.bytes, recount(&r.pts); got != want {
				t.Errorf("%s%v: accounted %d bytes, holds %d", r.name, r.labels(), got, want)
			}
		}
	}
	withView(t, s, "r", func(w detect.Window) {
		from := now.Add(-10 * time.Minute)
		want, _ := w.Increase(detect.Sel("c_total"), from, now)
		for _, sel := range []detect.Selector{detect.Sel("h_count"), detect.Sel("h_bucket", "le", "+Inf"), detect.Sel("h_bucket", "le", "10")} {
			if got, ok := w.Increase(sel, from, now); !ok || 2*got != want {
				t.Errorf("Increase(%v) = %v, %v; want half of c_total's %v", sel, got, ok, want)
			}
		}
		if got, ok := w.Increase(detect.Sel("h_bucket", "le", "1"), from, now); !ok || got != 0 {
			t.Errorf("Increase(le=1) = %v, %v; want 0", got, ok)
		}
	})
}

// bucketSamples are a histogram whose observations all fall between 1
// and 10: le=1 stays 0, le=10 and +Inf hold v. le=20 holds v too but
// misses scrape 200.
func bucketSamples(v float64, i int) []series.Sample {
	out := []series.Sample{smp("h_bucket", 0, "le", "1"), smp("h_bucket", v, "le", "10")}
	if i != 200 {
		out = append(out, smp("h_bucket", v, "le", "20"))
	}
	return append(out, smp("h_bucket", v, "le", "+Inf"))
}

// recount is what p holds by the accounting's rules: its list of entries,
// the bytes of the chunks it carries, and its head.
func recount(p *points) int {
	n := cap(p.sealed)*sealedBytes + p.headBytes()
	for k := range p.sealed {
		n += p.sealed[k].ownBytes()
	}
	return n
}

// A chunk shares only with a chunk of equal bytes that starts at the same
// seq and is thinned alike; a hash collision keeps its own bytes and
// leaves the table's entry as it was; a nil table shares nothing.
func TestChunkShareKeys(t *testing.T) {
	seed := maphash.MakeSeed()
	s := &chunkShare{seed: seed}
	a, b := []byte{2, 4, 6, 8}, []byte{2, 4, 6, 9}
	clone := slices.Clone[[]byte]
	held, shared := s.share(7, false, a, clone)
	if shared || &held[0] == &a[0] || !slices.Equal(held, a) {
		t.Fatalf("first chunk: shared %v, copied %v; want a copy held", shared, &held[0] != &a[0])
	}
	for _, c := range []struct {
		name    string
		first   uint64
		thinned bool
		data    []byte
		want    bool
	}{
		{"equal", 7, false, slices.Clone(a), true},
		{"other bytes", 7, false, b, false},
		{"other first seq", 8, false, slices.Clone(a), false},
		{"thinned", 7, true, slices.Clone(a), false},
	} {
		got, shared := s.share(c.first, c.thinned, c.data, clone)
		if shared != c.want || (&got[0] == &held[0]) != c.want || !slices.Equal(got, c.data) {
			t.Errorf("%s: shared %v, same bytes %v; want %v", c.name, shared, &got[0] == &held[0], c.want)
		}
	}

	planted := []byte{1, 1, 1}
	key := shareKey{first: 9, sum: maphash.Bytes(seed, a)}
	s.byChunk[key] = planted
	if got, shared := s.share(9, false, a, clone); shared || !slices.Equal(got, a) {
		t.Errorf("a colliding chunk: shared %v, bytes %v; want its own %v", shared, got, a)
	}
	if !slices.Equal(s.byChunk[key], planted) {
		t.Errorf("a colliding chunk replaced the entry: %v", s.byChunk[key])
	}

	var none *chunkShare
	if got, shared := none.share(7, false, a, clone); shared || &got[0] == &a[0] || !slices.Equal(got, a) {
		t.Errorf("nil table: shared %v, copied %v", shared, &got[0] != &a[0])
	}
}
