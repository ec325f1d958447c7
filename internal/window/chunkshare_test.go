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
// thinned chunks' bytes, counted once by the replica and by none of them,
// and every series still reads its own values. A series with other values
// shares nothing, nor does a counter with the same values that is not
// thinned, and a series that missed a scrape stops sharing once its
// chunks start at other seqs. Through sealing, thinning and retention the
// replica's accounting stays what it holds.
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
		checkAccounting(t, s.replicas["r"])
	}
	rec := func(family string, le string) *seriesRec {
		for _, r := range s.replicas["r"].families[family] {
			if le == "" || (r.is(recHasLE) && r.set.labels[0].Value == le) {
				return r
			}
		}
		t.Fatalf("no series %s{le=%q}", family, le)
		return nil
	}
	first, inf, count := rec("h_bucket", "10"), rec("h_bucket", "+Inf"), rec("h_count", "")
	gapped := rec("h_bucket", "20")
	if len(first.pts.sealed) < 2 || !first.pts.sealed[0].run.thinned() || first.pts.sealed[len(first.pts.sealed)-1].run.thinned() {
		t.Fatalf("want thinned and full-resolution chunks held, got %d chunks", len(first.pts.sealed))
	}
	if first.pts.sealed[0].first == 0 {
		t.Fatal("retention dropped no chunk")
	}
	for _, r := range []*seriesRec{first, inf, count} {
		if len(r.pts.sealed) != len(first.pts.sealed) {
			t.Fatalf("%s: %d chunks, le=10 %d", r.name, len(r.pts.sealed), len(first.pts.sealed))
		}
		for k := range first.pts.sealed {
			c := &r.pts.sealed[k]
			if c.data != first.pts.sealed[k].data || c.ownBytes() != 0 {
				t.Errorf("%s chunk %d (thinned %v): own bytes (%d accounted), want le=10's, counted by the replica", r.name, k, c.run.thinned(), c.ownBytes())
			}
		}
	}
	for _, own := range []*seriesRec{rec("c_total", ""), rec("z_total", "")} {
		for k := range own.pts.sealed {
			if c := &own.pts.sealed[k]; c.ownBytes() == 0 || slices.ContainsFunc(first.pts.sealed, func(m sealedChunk) bool { return m.data == c.data }) {
				t.Errorf("%s chunk %d shares bytes with a bucket", own.name, k)
			}
		}
	}
	if g := gapped.pts.sealed[len(gapped.pts.sealed)-1]; g.first == first.pts.sealed[len(first.pts.sealed)-1].first || g.ownBytes() == 0 {
		t.Errorf("the bucket that missed a scrape still shares its newest chunk (first %d)", g.first)
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

// A replica whose shared chunks lose their holders in any order (here the
// series that made them stops first, then the others one by one, each
// right after sealing a chunk, so that the sweep frees the series with
// that chunk) counts the bytes until the last holder drops them, then
// frees them.
func TestSharedChunksFreedWithTheirLastHolder(t *testing.T) {
	opts := Options{Retention: 10 * time.Minute, ScrapeInterval: 5 * time.Second}
	s := newTestStore(t, opts)
	r := func() *replica { return s.replicas["r"] }
	stops := map[string]int{"a_total": 2*samplesPerChunk + 1, "b_total": 3*samplesPerChunk + 1, "c_total": 4*samplesPerChunk + 1}
	for i := range 700 {
		v := float64(i * (1 + i%3))
		var samples []series.Sample
		for _, name := range []string{"a_total", "b_total", "c_total"} {
			if i < stops[name] {
				samples = append(samples, smp(name, v))
			}
		}
		samples = append(samples, smp("up", 1))
		mustAppend(t, s, okScrape("r", t0.Add(time.Duration(i)*opts.ScrapeInterval), samples...))
		checkAccounting(t, r())
		if i == 2*samplesPerChunk && len(r().shared.holders) == 0 {
			t.Fatal("three counters of equal values share no chunk")
		}
	}
	if n := len(r().shared.holders); n != 0 {
		t.Errorf("%d shared chunks still counted after every holder stopped past the retention", n)
	}
}

// checkAccounting fails the test unless the replica's accounting is what
// it holds: every series' record and points (its own chunks' bytes),
// the label sets its series made, each shared chunk's bytes and table
// entry once, and the scrape times and last scrape's order; and unless
// the shared table counts exactly the entries that hold each chunk.
func checkAccounting(t *testing.T, r *replica) {
	t.Helper()
	want := 8*len(r.times.buf) + 8*cap(r.order)
	holders := map[*byte]int32{}
	size := map[*byte]int{}
	for _, recs := range r.families {
		for _, rec := range recs {
			want += rec.ownBytes()
			for k := range rec.pts.sealed {
				if c := &rec.pts.sealed[k]; c.run.flags&runSharedBytes != 0 {
					holders[c.data]++
					size[c.data] = int(c.run.size)
				}
			}
		}
	}
	for data, n := range size {
		want += n + sharedEntryBytes
		if got := r.shared.holders[data]; got != holders[data] {
			t.Fatalf("a shared chunk of %d bytes: table counts %d holders, %d entries hold it", n, got, holders[data])
		}
	}
	if len(r.shared.holders) != len(size) {
		t.Fatalf("table counts %d shared chunks, entries hold %d", len(r.shared.holders), len(size))
	}
	if r.bytes != want {
		t.Fatalf("replica accounted %d bytes, holds %d", r.bytes, want)
	}
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
// A chunk shares only with a chunk of equal bytes that starts at the same
// seq, is thinned alike and is still held by the series that made it; the
// first share passes the bytes from the maker's accounting to the table,
// which counts every holder and frees the bytes with the last. A hash
// collision keeps its own bytes and leaves the table's entry as it was; a
// nil chunkShare shares nothing.
func TestChunkShareKeys(t *testing.T) {
	seed := maphash.MakeSeed()
	var table sharedChunks
	s := &chunkShare{seed: seed, held: &table}
	a, b := []byte{2, 4, 6, 8}, []byte{2, 4, 6, 9}
	clone := slices.Clone[[]byte]
	maker := &points{}
	held, shared, delta := s.share(7, false, a, clone, maker, 0)
	if shared || delta != 0 || &held[0] == &a[0] || !slices.Equal(held, a) {
		t.Fatalf("first chunk: shared %v, delta %d, copied %v; want a copy held", shared, delta, &held[0] != &a[0])
	}
	maker.sealed = []sealedChunk{newSealedChunk(7, held, run{})}
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
		{"equal again", 7, false, slices.Clone(a), true},
	} {
		got, shared, _ := s.share(c.first, c.thinned, c.data, clone, &points{}, 0)
		if shared != c.want || (&got[0] == &held[0]) != c.want || !slices.Equal(got, c.data) {
			t.Errorf("%s: shared %v, same bytes %v; want %v", c.name, shared, &got[0] == &held[0], c.want)
		}
	}
	if m := &maker.sealed[0]; m.ownBytes() != 0 || table.holders[m.data] != 3 {
		t.Errorf("after two shares: maker accounts %d of its chunk's bytes, table counts %d holders; want 0, and 3",
			m.ownBytes(), table.holders[m.data])
	}
	sharer := newSealedChunk(7, held, run{flags: runSharedBytes})
	for i, want := range []int{0, 0, len(a) + sharedEntryBytes} {
		c := &sharer
		if i == 0 {
			c = &maker.sealed[0] // the maker lets go first
		}
		if got := table.release(c); got != want {
			t.Errorf("release %d of 3: frees %d bytes, want %d", i+1, got, want)
		}
	}
	if len(table.holders) != 0 {
		t.Errorf("table holds %d chunks after the last holder let go", len(table.holders))
	}

	// The maker thinned its chunk again in this ingest: its bytes are
	// no longer held, so they are not shared.
	gone := &points{}
	g, _, _ := s.share(9, true, b, clone, gone, 0)
	gone.sealed = []sealedChunk{newSealedChunk(9, slices.Clone(b), run{})}
	if got, shared, _ := s.share(9, true, slices.Clone(b), clone, &points{}, 0); shared || &got[0] == &g[0] {
		t.Errorf("bytes their maker no longer holds: shared %v", shared)
	}

	// An entry whose hash a's meets, held by its maker.
	holder := &points{}
	planted := madeChunk{data: []byte{1, 1, 1}, p: holder, k: 0}
	holder.sealed = []sealedChunk{newSealedChunk(11, planted.data, run{})}
	key := shareKey{first: 11, sum: maphash.Bytes(seed, a)}
	s.byChunk[key] = planted
	if got, shared, _ := s.share(11, false, a, clone, &points{}, 0); shared || !slices.Equal(got, a) {
		t.Errorf("a colliding chunk: shared %v, bytes %v; want its own %v", shared, got, a)
	}
	if !slices.Equal(s.byChunk[key].data, planted.data) {
		t.Errorf("a colliding chunk replaced the entry: %v", s.byChunk[key].data)
	}

	var none *chunkShare
	if got, shared, _ := none.share(7, false, a, clone, maker, 0); shared || &got[0] == &a[0] || !slices.Equal(got, a) {
		t.Errorf("nil chunkShare: shared %v, copied %v", shared, &got[0] != &a[0])
	}
}

// Equal bytes can hold other values: a counter of integers and one of
// tenths whose digits are the same integers seal the same deltas. The
// series share the bytes, and a View, which decodes a chunk's bytes once
// for every series that holds them, still reads each its own values, in
// whichever order they are asked for.
func TestSharedBytesReadInEachSeriesEncoding(t *testing.T) {
	opts := Options{Retention: 30 * time.Minute, ScrapeInterval: 5 * time.Second}
	s := newTestStore(t, opts)
	const scrapes = 2*samplesPerChunk + 30
	value := func(i int) float64 { return float64(3*i + i%4) } // steps of 4, 4, 4, 0
	var now time.Time
	for i := range scrapes {
		now = t0.Add(time.Duration(i) * opts.ScrapeInterval)
		n := value(i)
		mustAppend(t, s, okScrape("r", now, smp("whole_total", n), smp("tenths_total", n/10)))
	}
	r := s.replicas["r"]
	whole, tenths := &r.families["whole_total"][0].pts, &r.families["tenths_total"][0].pts
	if len(whole.sealed) != 2 || whole.sealed[1].data != tenths.sealed[1].data || whole.sealed[1].run.enc == tenths.sealed[1].run.enc {
		t.Fatalf("want the newest sealed chunk's bytes shared in two encodings, got %d chunks (%v, %v)",
			len(whole.sealed), whole.sealed[len(whole.sealed)-1].run.enc, tenths.sealed[len(tenths.sealed)-1].run.enc)
	}
	// From the middle of the shared chunk (a range holds the scrapes after
	// its start) to the newest scrape.
	from := t0.Add(time.Duration(samplesPerChunk+samplesPerChunk/2) * opts.ScrapeInterval)
	first := samplesPerChunk + samplesPerChunk/2 + 1
	wantWhole := value(scrapes-1) - value(first)
	wantTenths := value(scrapes-1)/10 - value(first)/10
	for _, order := range [][]string{{"whole_total", "tenths_total"}, {"tenths_total", "whole_total"}} {
		withView(t, s, "r", func(w detect.Window) {
			for _, name := range order {
				want := wantWhole
				if name == "tenths_total" {
					want = wantTenths
				}
				if got, ok := w.Increase(detect.Sel(name), from, now); !ok || got != want {
					t.Errorf("read %v: Increase(%s) = %v, %v; want %v", order, name, got, ok, want)
				}
			}
		})
	}
}
