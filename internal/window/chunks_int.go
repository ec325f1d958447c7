package window

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
)

// Integer chunks. The counters SGLang exposes (requests, tokens, histogram
// buckets) count whole things and grow between scrapes by steps that change
// little from one scrape to the next; XOR encoding spends about 27 bits on
// such a step of a busy replica's latency bucket, a varint of the step
// about 13 and a varint of the step's change about 9 (measured over the
// moving fixture: 1.60 bytes per point for steps, 1.17 for their changes).
// A full head chunk whose values are all integers (finite, |v| <= 2^53, not
// -0, so that the round trip through int64 is exact) is sealed as one
// uvarint per sample: zigzag(step - previous step) shifted left by one, its
// low bit set when a uvarint of the seq gap follows (a scrape the series
// missed; without it the gap is 1). A step is the value minus the previous
// value; the first sample's is its value (the previous value is 0), and the
// step before the first and before the second is 0, so that a counter's
// level is not taken for its rate. The first sample's seq is the chunk's
// first. A run of minZeroRun or more samples that keep their step (zero
// change) at one seq gap is one token instead: the uvarint 1 (a zero change
// with a gap), the gap 0, which no sample has, then uvarints of how many
// samples and of their gap. A bucket that nothing falls into, or one whose
// observations arrive at a steady rate, is such runs; they were three in
// ten of a busy replica's integer samples (the moving fixture).

// isInt reports whether v round-trips exactly through int64 as an integer
// chunk stores it.
func isInt(v float64) bool {
	return v == math.Trunc(v) && math.Abs(v) <= 1<<53 && !(v == 0 && math.Signbit(v))
}

// minZeroRun is the shortest run written as a run token: the token takes
// four bytes where each sample at a gap of one takes one.
const minZeroRun = 5

// appendIntSample appends one sample to the integer head (see appendInt),
// folding the samples that keep their step at one gap into a run token.
// first: the head's first sample, whose dd is its value.
func (p *points) appendIntSample(gap uint64, first bool, dd int64) {
	var buf [maxIntTokenBytes]byte
	zero := !first && dd == 0 && gap <= math.MaxUint16
	switch {
	case zero && p.headZeros > 0 && uint64(p.headZeroGap) == gap && p.headZeros < math.MaxUint16:
		n := p.headZeros + 1
		switch {
		case n < minZeroRun:
			p.appendHead(appendInt(buf[:0], gap, false, 0))
		case n == minZeroRun:
			// The samples so far are single tokens: fold them.
			single := 1
			if gap != 1 {
				single += uvarintLen(gap)
			}
			p.headInts = p.headInts[:len(p.headInts)-int(p.headZeros)*single]
			p.appendHead(appendZeroRun(buf[:0], uint64(n), gap))
		default:
			p.headInts = p.headInts[:len(p.headInts)-2-uvarintLen(uint64(p.headZeros))-uvarintLen(gap)]
			p.appendHead(appendZeroRun(buf[:0], uint64(n), gap))
		}
		p.headZeros = n
	case zero:
		p.appendHead(appendInt(buf[:0], gap, false, 0))
		p.headZeros, p.headZeroGap = 1, uint16(gap)
	default:
		p.appendHead(appendInt(buf[:0], gap, first, dd))
		p.headZeros = 0
	}
}

// maxIntTokenBytes is the most bytes one token of an integer chunk
// takes: a sample's change of step, zigzagged and shifted, and its gap,
// two uvarints of at most 10 bytes (a run token takes at most 8: two
// marker bytes and two uvarints below 2^16).
const maxIntTokenBytes = 2 * binary.MaxVarintLen64

// appendHead appends a token to the integer head. When the head is full
// it grows by an eighth of its length (at least the token, and up to the
// allocator's size class), where append would double it: a head grows a
// byte or two a scrape for up to samplesPerChunk scrapes, so room made
// by doubling sat unused for most of them, in every series. The windows
// average ≈2% less over a cycle (TestWindowMemoryAtProductionRetention).
func (p *points) appendHead(tok []byte) {
	if cap(p.headInts)-len(p.headInts) < len(tok) {
		grown := slices.Grow([]byte(nil), len(p.headInts)+max(len(tok), len(p.headInts)/8))
		p.headInts = append(grown, p.headInts...)
	}
	p.headInts = append(p.headInts, tok...)
}

// uvarintLen is how many bytes binary.AppendUvarint writes for x.
func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// appendZeroRun appends the run token of n samples that keep their step,
// each gap after the one before.
func appendZeroRun(out []byte, n, gap uint64) []byte {
	out = append(out, 1, 0)
	out = binary.AppendUvarint(out, n)
	return binary.AppendUvarint(out, gap)
}

// appendInt appends one sample: its seq gap from the previous sample (the
// first's is ignored: its seq is the chunk's first) and the change of its
// step from the previous step.
func appendInt(out []byte, gap uint64, first bool, dd int64) []byte {
	if first {
		gap = 1
	}
	u := zigzag(dd) << 1
	if gap != 1 {
		u |= 1
	}
	out = binary.AppendUvarint(out, u)
	if gap != 1 {
		out = binary.AppendUvarint(out, gap)
	}
	return out
}

// nextInt reads one token of an integer chunk: the seq gap and the change
// of step of its n samples (one, or a run's), and the rest of the data.
// Most tokens are one byte, read without a call.
func nextInt(data []byte) (rest []byte, gap uint64, dd int64, n uint64) {
	var u uint64
	if data[0] < 0x80 {
		u, data = uint64(data[0]), data[1:]
	} else {
		var k int
		u, k = binary.Uvarint(data)
		data = data[k:]
	}
	gap, n = 1, 1
	if u&1 == 1 {
		var k int
		gap, k = binary.Uvarint(data)
		data = data[k:]
		if gap == 0 { // a run
			n, k = binary.Uvarint(data)
			data = data[k:]
			gap, k = binary.Uvarint(data)
			data = data[k:]
		}
	}
	return data, gap, unzigzag(u >> 1), n
}

// intSamples reads an integer chunk sample by sample, a run token's
// samples one by one. Its zero value with data and the chunk's first seq
// set starts at the first sample.
type intSamples struct {
	data    []byte
	seq     uint64 // of the sample last returned (the first's, before it)
	v, step int64
	gap     uint64 // of the current token
	left    uint64 // samples of the current token not yet returned
	started bool
}

// next returns the next sample, ok false past the last.
func (it *intSamples) next() (seq uint64, v int64, ok bool) {
	switch {
	case !it.started:
		if len(it.data) == 0 {
			return 0, 0, false
		}
		it.data, _, it.v, _ = nextInt(it.data) // the first sample: its value
		it.started = true
		return it.seq, it.v, true
	case it.left == 0:
		if len(it.data) == 0 {
			return 0, 0, false
		}
		var dd int64
		it.data, it.gap, dd, it.left = nextInt(it.data)
		it.step += dd
	}
	it.left--
	it.seq += it.gap
	it.v += it.step
	return it.seq, it.v, true
}

// readInts decodes an integer chunk starting at seq first into out, which
// holds the seqs [lo, hi), and returns the seq after the last one it
// wrote. It is the hot path of a View, so its loop is written out rather
// than read through intSamples: an iterator made snapshot queries ≈20%
// slower (BenchmarkStageView).
func readInts(data []byte, first uint64, out []float64, lo, hi uint64) (end uint64) {
	if len(data) == 0 || first >= hi {
		return lo
	}
	data, _, v, _ := nextInt(data) // the first sample: its value, at seq first
	seq, step := first, int64(0)
	if seq >= lo {
		out[seq-lo] = float64(v)
	}
	for len(data) > 0 {
		if b := data[0]; b&0x81 == 0 {
			// One byte, one sample at a gap of one: most tokens, read
			// here rather than through nextInt, which is not inlined.
			data = data[1:]
			step += unzigzag(uint64(b >> 1))
			seq++
			if seq >= hi {
				return hi
			}
			v += step
			if seq >= lo {
				out[seq-lo] = float64(v)
			}
			continue
		}
		var gap, n uint64
		var dd int64
		data, gap, dd, n = nextInt(data)
		step += dd
		for ; n > 0; n-- {
			seq += gap
			if seq >= hi {
				return hi
			}
			v += step
			if seq >= lo {
				out[seq-lo] = float64(v)
			}
		}
	}
	return max(seq+1, lo)
}

// zigzag maps a signed difference to an unsigned one with small magnitudes
// small: 0, -1, 1, -2 → 0, 1, 2, 3. A step between integers of at most
// 2^53 is at most 2^54, the change of a step at most 2^55, so neither this
// shift nor the one more in appendInt can overflow.
func zigzag(d int64) uint64 { return uint64(d<<1) ^ uint64(d>>63) }

func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }
