package window

import (
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// A head chunk of integers is kept, and sealed, as integer deltas and reads
// back exactly, gaps (scrapes the series missed), drops and values at the
// edge of exact float64 integers included; at any other value the head is
// re-encoded as XOR and reads back just as exactly. A full head of short
// decimals is sealed as integers times 10^k, and of other floats as XOR.
func TestIntegerChunksRoundTrip(t *testing.T) {
	type sample struct {
		seq uint64
		v   float64
	}
	cases := []struct {
		name    string
		samples []sample
		ints    bool     // the head
		sealed  encoding // the full chunk
	}{
		{"counter with gaps and a reset", []sample{{100, 0}, {101, 3}, {102, 3}, {105, 1e6}, {106, 2}, {400, 1 << 53}, {401, -(1 << 53)}}, true, encInts},
		{"negative zero", []sample{{1, 1}, {2, math.Copysign(0, -1)}}, false, encXOR},
		{"a fraction", []sample{{1, 1}, {2, 1.5}, {4, 7}}, false, encInts + 1},
		{"a fraction first", []sample{{1, 0.25}, {2, 1}}, false, encInts + 2},
		// The integer head, a run token in it, re-encoded as XOR.
		{"a run, then a fraction", []sample{{1, 3}, {2, 5}, {3, 7}, {4, 9}, {5, 11}, {6, 13}, {7, 15}, {9, 19}, {10, 19.5}}, false, encInts + 1},
		{"a fraction first, far into the scrapes", []sample{{1 << 40, -0.5}, {1<<40 + 1, 1}}, false, encInts + 1},
		{"SGLang's rounded gauges", []sample{{1, 0.41}, {2, 1184.52}, {3, 0.4213}, {5, -3.07}, {6, 0.1}, {7, 0.3}}, false, encInts + 4},
		{"six decimals", []sample{{1, 0.123456}, {2, 99999.000001}}, false, encInts + 6},
		{"seven decimals", []sample{{1, 0.1234567}}, false, encXOR},
		{"a ratio at full precision", []sample{{1, 0.41}, {2, 0.7356547327121138}}, false, encXOR},
		{"a decimal past 2^53 at its scale", []sample{{1, 0.5}, {2, 1 << 52}}, false, encXOR},
		{"NaN first", []sample{{7, math.NaN()}, {8, 1}}, false, encXOR},
		{"NaN", []sample{{1, 1}, {2, math.NaN()}}, false, encXOR},
		{"past 2^53", []sample{{1, 1 << 54}}, false, encXOR},
		// Runs of samples that keep their step: a bucket nothing falls
		// into, one filling at a steady rate, runs at a gap of 3 and of
		// 300 (missed scrapes), runs one short of minZeroRun, and a run
		// broken by a change of step and resumed.
		{"runs that keep their step", func() []sample {
			var out []sample
			seq, v, step := uint64(10), 5.0, 0.0
			add := func(n int, gap uint64, s float64) {
				for range n {
					seq, step = seq+gap, s
					v += step
					out = append(out, sample{seq, v})
				}
			}
			add(30, 1, 0)
			add(minZeroRun-1, 1, 3)
			add(1, 1, 4)
			add(12, 3, 4)
			add(minZeroRun, 300, 4)
			add(minZeroRun-2, 1, 7)
			add(1, 1, 6)
			add(20, 1, 6)
			return out
		}(), true, encInts},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p points
			for _, s := range c.samples {
				p.put(s.seq, s.v, nil)
			}
			// The newest value stays unencoded: one more puts every case's
			// samples in the head.
			p.put(c.samples[len(c.samples)-1].seq+1, 0, nil)
			if ints := p.xor == nil; ints != c.ints {
				t.Fatalf("head encoded as integers: %v, want %v", ints, c.ints)
			}
			first := c.samples[0].seq
			want := map[uint64]float64{}
			for _, s := range c.samples {
				want[s.seq] = s.v
			}
			want[c.samples[len(c.samples)-1].seq+1] = 0
			check := func(t *testing.T, what string, out []float64, lo uint64) {
				t.Helper()
				for i, got := range out {
					seq := lo + uint64(i)
					w, ok := want[seq]
					switch {
					case ok && math.IsNaN(w) && math.IsNaN(got):
					case ok && (got != w || math.Signbit(got) != math.Signbit(w)):
						t.Errorf("%s: seq %d: %v, want %v", what, seq, got, w)
					case !ok && !math.IsNaN(got):
						t.Errorf("%s: seq %d has no sample but reads %v", what, seq, got)
					}
				}
			}
			last := c.samples[len(c.samples)-1].seq
			var d decoder
			check(t, "head", d.fill(&p, first, last+1), first)
			// A range inside the chunk reads only its part.
			check(t, "head part", d.fill(&p, first+1, first+3), first+1)

			// Filled up, the head is sealed.
			for i := range uint64(samplesPerChunk) {
				p.put(last+2+i, float64(i), nil)
			}
			if len(p.sealed) != 1 {
				t.Fatalf("%d sealed chunks, want 1", len(p.sealed))
			}
			if enc := p.sealed[0].run.enc; enc != c.sealed {
				t.Fatalf("sealed in encoding %d, want %d", enc, c.sealed)
			}
			check(t, "sealed", d.fill(&p, first, last+1), first)
			got, w := firstValue(&p.sealed[0]), c.samples[0].v
			if got != w && !(math.IsNaN(got) && math.IsNaN(w)) || math.Signbit(got) != math.Signbit(w) {
				t.Errorf("first value %v, want %v", got, w)
			}
			// A range inside the chunk reads only its part (within the
			// case's samples: the filler's are not in want).
			hi := min(first+4, last+2)
			part := make([]float64, hi-(first+1))
			for i := range part {
				part[i] = math.NaN()
			}
			d.readSealed(&p.sealed[0], part, first+1, hi)
			check(t, "sealed part", part, first+1)
		})
	}
}

// A counter that grows at a steady rate, as a busy replica's request and
// bucket counters nearly do, costs about one byte per point however large
// its level and step: what is stored is how much the step changed.
func TestIntegerChunkOfASteadyCounterIsAByteAPoint(t *testing.T) {
	var p points
	for i := range uint64(samplesPerChunk + 1) {
		p.put(1+i, 1e9+float64(i)*2500+float64(i%2), nil) // steps of 2500 and 2502 in turn
	}
	if len(p.sealed) != 1 || !p.sealed[0].run.enc.ints() {
		t.Fatalf("want one sealed integer chunk, got %d", len(p.sealed))
	}
	// The first sample is the level (5 bytes), the second the first step
	// (2 bytes); every later one a change of step of ±2 (1 byte).
	if n, most := len(p.sealed[0].bytes()), 5+2+(samplesPerChunk-2); n > most {
		t.Errorf("a steady counter's chunk takes %d bytes for %d points, want <= %d", n, samplesPerChunk, most)
	}
	var d decoder
	out := d.fill(&p, 1, 1+samplesPerChunk)
	for i, v := range out {
		if want := 1e9 + float64(i)*2500 + float64(i%2); v != want {
			t.Fatalf("seq %d reads %v, want %v", 1+i, v, want)
		}
	}
}

// A bucket that nothing falls into, and one whose observations arrive at a
// steady rate, keep their step from scrape to scrape: a chunk of them is a
// few bytes, a run token, not a byte per point.
func TestIntegerChunkOfRunsIsAFewBytes(t *testing.T) {
	for _, c := range []struct {
		name string
		step float64
	}{{"nothing falls into it", 0}, {"a steady rate", 40}} {
		t.Run(c.name, func(t *testing.T) {
			var p points
			for i := range uint64(samplesPerChunk + 1) {
				p.put(1+i, 7e6+float64(i)*c.step, nil)
			}
			if len(p.sealed) != 1 || !p.sealed[0].run.enc.ints() {
				t.Fatalf("want one sealed integer chunk, got %d", len(p.sealed))
			}
			// The level (4 bytes), the first step (1-2 bytes), then one
			// run token of the other 118 points (4 bytes).
			if n := len(p.sealed[0].bytes()); n > 10 {
				t.Errorf("%d bytes for %d points, want <= 10", n, samplesPerChunk)
			}
			var d decoder
			for i, v := range d.fill(&p, 1, 1+samplesPerChunk) {
				if want := 7e6 + float64(i)*c.step; v != want {
					t.Fatalf("seq %d reads %v, want %v", 1+i, v, want)
				}
			}
		})
	}
}

// A segment the summaries show rising (points.summarisedRising) is one
// whose decoded values are: finite at every seq and never dropping. Over
// series of every shape (gaps, NaN, drops, -0 beside 0, runs of equal
// values, floats), every sealed chunk and every head, after every sample.
func TestSummarisedRisingOnlyWhereValuesRise(t *testing.T) {
	shapes := map[string]func(seq uint64) (v float64, present bool){
		"counter":            func(seq uint64) (float64, bool) { return float64(seq * 3), true },
		"flat":               func(seq uint64) (float64, bool) { return 7, true },
		"a gap":              func(seq uint64) (float64, bool) { return float64(seq), seq%97 != 50 },
		"a drop":             func(seq uint64) (float64, bool) { return float64(seq % 150), true },
		"NaN inside":         func(seq uint64) (float64, bool) { return nanAt(seq, 130), true },
		"NaN first":          func(seq uint64) (float64, bool) { return nanAt(seq, 0), true },
		"negative zero":      func(seq uint64) (float64, bool) { return math.Copysign(0, float64(seq%2)-0.5), true },
		"floats":             func(seq uint64) (float64, bool) { return float64(seq) * 1.000001, true },
		"last one drops":     func(seq uint64) (float64, bool) { return float64(seq) - float64(seq%121/120)*2, true },
		"infinity":           func(seq uint64) (float64, bool) { return infAt(seq, 200), true },
		"steps of a run":     func(seq uint64) (float64, bool) { return float64(seq / 10), true },
		"a gap at the chunk": func(seq uint64) (float64, bool) { return float64(seq), seq != 120 && seq != 121 },
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			var p points
			claimed := 0
			for seq := range uint64(3*samplesPerChunk + 17) {
				v, ok := shape(seq)
				if !ok {
					continue
				}
				p.put(seq, v, nil)
				for k := -1; k < len(p.sealed); k++ {
					if k < 0 && !p.hasNewest {
						continue
					}
					if !p.summarisedRising(k) {
						continue
					}
					claimed++
					lo, hi := p.bounds(k)
					var d decoder
					vals := d.fill(&p, lo, hi)
					prev := math.Inf(-1)
					for i, x := range vals {
						if !finite(x) || x < prev {
							t.Fatalf("after seq %d, segment %d claimed rising, but seq %d reads %v after %v", seq, k, lo+uint64(i), x, prev)
						}
						prev = x
					}
				}
			}
			t.Logf("%d segments claimed rising", claimed)
		})
	}
}

func nanAt(seq, at uint64) float64 {
	if seq == at {
		return math.NaN()
	}
	return float64(seq)
}

func infAt(seq, at uint64) float64 {
	if seq == at {
		return math.Inf(1)
	}
	return float64(seq)
}

// A View's memo finds every segment put in it, under its bytes, first seq
// and shape, or its series' head, through collisions and growth; nothing
// it was not given, and nothing after a reset.
func TestSegmentMemoFindsExactlyWhatWasPut(t *testing.T) {
	series := make([]points, 300)
	chunkBytes := make([]byte, 300)
	// keys are segment i's keys: its series' head, and chunks of its bytes
	// at six first seqs, each in two shapes (encoding, span).
	keys := func(i int) []memoKey {
		ks := []memoKey{headKey(&series[i])}
		for first := range uint64(6) {
			for _, shape := range []uint64{uint64(encInts)<<32 | 120, uint64(encXOR)<<32 | 120} {
				ks = append(ks, memoKey{at: unsafe.Pointer(&chunkBytes[i]), first: first, shape: shape})
			}
		}
		return ks
	}
	never := func(i int) []memoKey {
		return []memoKey{
			{at: unsafe.Pointer(&chunkBytes[i]), first: 6, shape: uint64(encInts)<<32 | 120},
			{at: unsafe.Pointer(&chunkBytes[i]), first: 0, shape: uint64(encInts)<<32 | 119},
			{at: unsafe.Pointer(&series[i]), first: 0, shape: uint64(encInts)<<32 | 120},
		}
	}
	var m segmentMemo
	for round := range 3 {
		for i := range series {
			for j, k := range keys(i) {
				if _, ok := m.get(k); ok {
					t.Fatalf("round %d: segment (%d, %d) found before it was put", round, i, j)
				}
				m.put(k, decoded{vals: []float64{float64(i*100 + j)}})
			}
		}
		for i := range series {
			for j, k := range keys(i) {
				if seg, ok := m.get(k); !ok || seg.vals[0] != float64(i*100+j) {
					t.Fatalf("round %d: segment (%d, %d) = %v, %v; want %d", round, i, j, seg.vals, ok, i*100+j)
				}
			}
			for j, k := range never(i) {
				if seg, ok := m.get(k); ok {
					t.Fatalf("round %d: key %d of %d, never put, found %v", round, j, i, seg.vals)
				}
			}
		}
		m.reset()
	}
	// Keys that start probing at the same slot: chunks of the same bytes,
	// and the heads of two series (of 257 keys, two share one of 256
	// slots).
	var small segmentMemo
	small.grow()
	if len(small.slots) != 256 {
		t.Fatalf("a new memo has %d slots, the test assumes 256", len(small.slots))
	}
	colliding := func(keys []memoKey) (a, b memoKey) {
		seen := map[int]memoKey{}
		for _, c := range keys {
			if o, ok := seen[small.slot(c)]; ok {
				return o, c
			}
			seen[small.slot(c)] = c
		}
		t.Fatal("no two keys share a slot")
		return
	}
	var chunks, heads []memoKey
	for first := range uint64(257) {
		chunks = append(chunks, memoKey{at: unsafe.Pointer(&chunkBytes[0]), first: first, shape: 120})
	}
	for i := range 257 {
		heads = append(heads, headKey(&series[i]))
	}
	for _, keys := range [][]memoKey{chunks, heads} {
		a, b := colliding(keys)
		small.put(a, decoded{vals: []float64{1}})
		small.put(b, decoded{vals: []float64{2}})
		if seg, ok := small.get(a); !ok || seg.vals[0] != 1 {
			t.Errorf("the first of two colliding segments = %v, %v", seg.vals, ok)
		}
		if seg, ok := small.get(b); !ok || seg.vals[0] != 2 {
			t.Errorf("the second of two colliding segments = %v, %v", seg.vals, ok)
		}
		small.reset()
	}
}

// A head segment decoded for one series is reused for the next only when
// both decode to the same values at the same seqs: equal head bytes from
// the same first seq, and the same unencoded newest value.
func TestSameHead(t *testing.T) {
	build := func(first uint64, vals ...float64) *points {
		p := &points{}
		for i, v := range vals {
			p.put(first+uint64(i), v, nil)
		}
		return p
	}
	nan := math.NaN()
	for _, c := range []struct {
		name string
		a, b *points
		want bool
	}{
		{"equal", build(1, 3, 5, 9, 10), build(1, 3, 5, 9, 10), true},
		{"only a newest value, equal", build(1, 3), build(1, 3), true},
		{"newest NaN in both", build(1, 3, 5, nan), build(1, 3, 5, nan), true},
		{"other newest value", build(1, 3, 5, 9, 10), build(1, 3, 5, 9, 11), false},
		{"other head value", build(1, 3, 6, 9, 10), build(1, 3, 5, 9, 10), false},
		{"one seq later", build(2, 3, 5, 9, 10), build(1, 3, 5, 9, 10), false},
		{"one more sample", build(1, 3, 5, 9, 10, 10), build(1, 3, 5, 9, 10), false},
		{"floats", build(1, 0.5, 1.5, 2), build(1, 0.5, 1.5, 2), true},
		{"floats against integers", build(1, 0.5, 2, 2), build(1, 1, 2, 2), false},
	} {
		if got := sameHead(c.a, c.b); got != c.want {
			t.Errorf("%s: sameHead = %v, want %v", c.name, got, c.want)
		}
		if got := sameHead(c.b, c.a); got != c.want {
			t.Errorf("%s, swapped: sameHead = %v, want %v", c.name, got, c.want)
		}
	}
}

// Series read one after the other in a View each read their own head:
// one whose head equals the one read before it reads it through the
// decoded copy, one that differs only in its newest value or a value
// inside its head does not.
func TestViewReadsEachSeriesOwnHead(t *testing.T) {
	s := newTestStore(t, Options{Retention: time.Hour, ScrapeInterval: 5 * time.Second})
	for i := range 30 {
		v := float64(10 * i)
		last, inner := v, v
		if i == 29 {
			last = v + 1
		}
		if i == 20 {
			inner = v + 2
		}
		mustAppend(t, s, okScrape("r", at(float64(5*i)),
			smp("h_bucket", v, "le", "1"), smp("h_bucket", v, "le", "2"),
			smp("h_bucket", last, "le", "5"), smp("h_bucket", inner, "le", "+Inf")))
	}
	withView(t, s, "r", func(w detect.Window) {
		// Scrapes 20 to 29: 200 to 290, le=5 ends at 291, +Inf starts at
		// 202. In this order, le=2 and le=5 hold the same head bytes.
		from, to := at(5*19), at(5*29)
		for _, c := range []struct {
			le   string
			want float64
		}{{"1", 90}, {"2", 90}, {"5", 91}, {"+Inf", 88}} {
			got, ok := w.Increase(detect.Sel("h_bucket", "le", c.le), from, to)
			if !ok || got != c.want {
				t.Errorf("Increase(le=%s) = %v, %v; want %v", c.le, got, ok, c.want)
			}
		}
	})
}

// Dropping and merging chunks leaves a series' list of entries the length
// of its array, so that the accounting, which counts the array, counts no
// entry that holds nothing; and the changes in bytes that putting,
// thinning and dropping return add up to what the points hold.
func TestSealedListFitsItsChunks(t *testing.T) {
	var p points
	var buf []float64
	accounted := 0
	for seq := uint64(1); seq <= 12*samplesPerChunk; seq++ {
		accounted += p.put(seq, float64(seq*3), nil)
		if seq%samplesPerChunk == samplesPerChunk/2 && seq > 2*samplesPerChunk {
			var d int
			d, buf = p.thinBefore(seq-2*samplesPerChunk, 12, buf, nil)
			accounted += d
			if cap(p.sealed) != len(p.sealed) {
				t.Fatalf("scrape %d, after thinning: %d entries in an array of %d", seq, len(p.sealed), cap(p.sealed))
			}
			accounted += p.dropBefore(max(seq, 8*samplesPerChunk)-8*samplesPerChunk, nil)
			if cap(p.sealed) != len(p.sealed) {
				t.Fatalf("scrape %d, after dropping: %d entries in an array of %d", seq, len(p.sealed), cap(p.sealed))
			}
		}
		if got, want := accounted, p.heldBytes(); got != want {
			t.Fatalf("scrape %d: accounted %d bytes, holds %d", seq, got, want)
		}
	}
	merged := false
	for k := range p.sealed {
		merged = merged || (p.sealed[k].run.thinned() && p.sealedEnd(k)-p.sealed[k].first > samplesPerChunk)
	}
	if !merged || p.sealed[0].first == 1 {
		t.Fatalf("want merged thinned chunks and dropped ones, got %d chunks from seq %d", len(p.sealed), p.sealed[0].first)
	}
}
