package window

import (
	"math"
	"testing"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// A chunk of integers is sealed as integer deltas and reads back exactly,
// gaps (scrapes the series missed), drops and values at the edge of exact
// float64 integers included; a chunk with any other value stays XOR.
func TestIntegerChunksRoundTrip(t *testing.T) {
	type sample struct {
		seq uint64
		v   float64
	}
	cases := []struct {
		name    string
		samples []sample
		ints    bool
	}{
		{"counter with gaps and a reset", []sample{{100, 0}, {101, 3}, {102, 3}, {105, 1e6}, {106, 2}, {400, 1 << 53}, {401, -(1 << 53)}}, true},
		{"negative zero", []sample{{1, 1}, {2, math.Copysign(0, -1)}}, false},
		{"a fraction", []sample{{1, 1}, {2, 1.5}}, false},
		{"NaN", []sample{{1, 1}, {2, math.NaN()}}, false},
		{"past 2^53", []sample{{1, 1 << 54}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			head := chunkenc.NewXORChunk()
			app, err := head.Appender()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range c.samples {
				app.Append(0, int64(s.seq), s.v)
			}
			first := c.samples[0].seq
			data, ints := encodeInts(head, first)
			if ints != c.ints {
				t.Fatalf("encoded as integers: %v, want %v", ints, c.ints)
			}
			if !ints {
				return
			}
			last := c.samples[len(c.samples)-1].seq
			out := make([]float64, last-first+1)
			for i := range out {
				out[i] = math.NaN()
			}
			readInts(data, first, out, first, last+1)
			want := map[uint64]float64{}
			for _, s := range c.samples {
				want[s.seq] = s.v
			}
			for i, got := range out {
				seq := first + uint64(i)
				if w, ok := want[seq]; ok {
					if got != w {
						t.Errorf("seq %d: %v, want %v", seq, got, w)
					}
				} else if !math.IsNaN(got) {
					t.Errorf("seq %d has no sample but reads %v", seq, got)
				}
			}
			var d decoder
			if got := d.firstValue(&sealedChunk{first: first, data: data, run: run{ints: true}}); got != c.samples[0].v {
				t.Errorf("first value %v, want %v", got, c.samples[0].v)
			}
			// A range inside the chunk reads only its part.
			part := []float64{math.NaN(), math.NaN(), math.NaN()}
			readInts(data, first, part, first+4, first+7)
			for i, got := range part {
				w, ok := want[first+4+uint64(i)]
				if (!ok && !math.IsNaN(got)) || (ok && got != w) {
					t.Errorf("seq %d read alone: %v, want %v (present %v)", first+4+uint64(i), got, w, ok)
				}
			}
		})
	}
}
