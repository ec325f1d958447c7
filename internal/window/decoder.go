package window

import (
	"bytes"
	"encoding/binary"
	"iter"
	"math"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// decoder reads series for one View: a chunk to reset onto sealed bytes, a
// reused iterator, and the chunks it decoded, so that the many questions
// detectors ask of one series in a round decode each of its chunks at most
// once. Values live in a slab reused between Views, so steady-state reads
// allocate nothing.
type decoder struct {
	chunk chunkenc.XORChunk
	it    chunkenc.Iterator
	memo  segmentMemo
	seqs  seqCache // view.seqAfter's
	slab  []float64
	vals  []float64 // a range spanning several chunks, stitched
	acc   []float64 // per-scrape combination over several series
	any   []bool
	// buckets is Quantile's scratch: a round asks for a dozen quantiles.
	buckets []bucket
	// lastHead is the series whose head segment was decoded last: the
	// next series asked for often holds the same head (sameHead).
	lastHead *points
	answers  answers
}

// seqCache is the last few times a View turned into seqs, and the seqs:
// the first min(next, 8) entries are filled, next%8 is replaced next.
type seqCache struct {
	nanos [8]int64
	seq   [8]uint64
	next  int
}

// decoded is a segment's values. rising marks values that are all finite
// (a point at every seq) and never drop, as a counter's are between
// restarts: a counter's increase over any piece of them is its last value
// minus its first (counterRuns.rising), with no step to look at.
type decoded struct {
	vals   []float64
	rising bool
}

// minSlab is the smallest slab: a few hundred chunks.
const minSlab = 1 << 15

// end forgets the View's values, keeping the memory for the next one.
func (d *decoder) end() {
	d.memo.reset()
	d.answers.reset()
	d.lastHead = nil
	d.seqs = seqCache{}
	d.slab = d.slab[:0]
}

// grow returns s resized to n, reallocating only when too small.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, n+n/4)
	}
	return s[:n]
}

// bounds are the seqs [lo, hi) segment k of p covers.
func (p *points) bounds(k int) (lo, hi uint64) {
	if k >= 0 {
		return p.sealed[k].first, p.sealedEnd(k)
	}
	if p.hasHead() {
		return p.headFirst, p.end()
	}
	return p.newest, p.end()
}

// span is one segment of a series that a seq range reads: sealed chunk k,
// or the head when k is -1. It covers the seqs [lo, hi), which may reach
// beyond the range.
type span struct {
	k      int
	lo, hi uint64
}

// within yields the segments of p that cover some of the seqs [lo, hi),
// oldest first, the head last.
func (p *points) within(lo, hi uint64) iter.Seq[span] {
	return func(yield func(span) bool) {
		for k := range p.sealed {
			slo, shi := p.sealed[k].first, p.sealedEnd(k)
			if shi > lo && slo < hi && !yield(span{k: k, lo: slo, hi: shi}) {
				return
			}
		}
		if slo, shi := p.bounds(-1); shi > lo && slo < hi {
			yield(span{k: -1, lo: slo, hi: shi})
		}
	}
}

// segmentValues returns the decoded values of segment k, decoding it the
// first time it is asked for in the View.
func (d *decoder) segmentValues(p *points, k int) []float64 { return d.segment(p, k).vals }

// segment is segmentValues with whether the values are rising.
func (d *decoder) segment(p *points, k int) decoded {
	key := segmentKey(p, k)
	if seg, ok := d.memo.get(key); ok {
		return seg
	}
	if k < 0 {
		// The buckets of a histogram are read one after the other, and
		// about half of the heads a round decodes hold what the head
		// decoded just before holds (the buckets above every
		// observation, those below): comparing the bytes costs a
		// fraction of decoding them.
		if q := d.lastHead; q != nil && sameHead(q, p) {
			if seg, ok := d.memo.get(headKey(q)); ok {
				d.memo.put(key, seg)
				return seg
			}
		}
		d.lastHead = p
	}
	lo, hi := p.bounds(k)
	if p.summarisedRising(k) {
		// A value at every seq: the segment alone is read, over no NaN.
		seg := decoded{vals: d.take(int(hi-lo), false), rising: true}
		if k >= 0 {
			d.readSealed(&p.sealed[k], seg.vals, lo, hi)
		} else {
			d.readHead(p, seg.vals, lo, hi)
		}
		d.memo.put(key, seg)
		return seg
	}
	seg := decoded{vals: d.fill(p, lo, hi), rising: true}
	prev := math.Inf(-1)
	for _, x := range seg.vals {
		// x-x is 0 for a finite x, NaN for NaN and both infinities.
		if x-x != 0 || x < prev {
			seg.rising = false
			break
		}
		prev = x
	}
	d.memo.put(key, seg)
	return seg
}

// sameHead reports whether the head segments of a and b (segment k = -1:
// the head chunk and the unencoded newest value) decode to the same
// values at the same seqs.
func sameHead(a, b *points) bool {
	if a.hasHead() != b.hasHead() || a.hasNewest != b.hasNewest ||
		a.newest != b.newest || math.Float64bits(a.newestVal) != math.Float64bits(b.newestVal) {
		return false
	}
	switch {
	case !a.hasHead():
		return true
	case a.headFirst != b.headFirst || a.headN != b.headN || (a.xor == nil) != (b.xor == nil):
		return false
	case a.xor == nil:
		return bytes.Equal(a.headInts, b.headInts)
	default:
		return bytes.Equal(a.xor.chunk.Bytes(), b.xor.chunk.Bytes())
	}
}

// sameReads reports whether a and b read the same from seq lo on: the same
// sealed chunks (bytes, seqs, summary) from the one holding lo to the
// newest, and the same head (sameHead). false says nothing.
func sameReads(a, b *points, lo uint64) bool {
	if !sameHead(a, b) {
		return false
	}
	i, j := len(a.sealed)-1, len(b.sealed)-1
	for ; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if a.sealed[i] != b.sealed[j] {
			return false
		}
		// Equal chunks end alike: at the next, equal, chunk's first, or
		// at the equal heads'.
		if a.sealed[i].first <= lo {
			return true
		}
	}
	// The one with chunks left must hold none that reaches lo.
	return (i < 0 || a.sealedEnd(i) <= lo) && (j < 0 || b.sealedEnd(j) <= lo)
}

// summarisedRising reports whether the summaries show segment k rising
// (decoded), so that its values need not be looked at again: as many
// finite values as seqs, counted up to the first drop (run.add stops
// counting there), and a newest value that neither is missing nor drops.
// A counter's sealed chunks and head between restarts are, and that scan
// ran over every decoded point, a few percent of a round. false says
// nothing.
func (p *points) summarisedRising(k int) bool {
	if k >= 0 {
		c := &p.sealed[k]
		return uint64(c.run.n) == p.sealedEnd(k)-c.first
	}
	return p.hasHead() && uint64(p.headRun.n) == uint64(p.headN) && p.headLast-p.headFirst+1 == uint64(p.headN) &&
		p.hasNewest && p.newest == p.headLast+1 && finite(p.newestVal) && p.newestVal >= p.headRun.lastVal
}

// values returns the series' values for the seqs [lo, hi), NaN where it
// has no sample; the slice is shorter when the series ends before hi. It
// is read-only, and valid until the next call.
func (d *decoder) values(p *points, lo, hi uint64) []float64 {
	hi = min(hi, p.end())
	if hi <= lo {
		return nil
	}
	var out []float64
	stitched := false
	for k := -1; k < len(p.sealed); k++ {
		slo, shi := p.bounds(k)
		if shi <= lo || slo >= hi {
			continue
		}
		seg := d.segmentValues(p, k)
		if slo <= lo && hi <= shi {
			return seg[lo-slo : hi-slo] // inside one segment: no copy
		}
		if !stitched {
			out = d.nanVals(int(hi - lo))
			stitched = true
		}
		from, to := max(lo, slo), min(hi, shi)
		copy(out[from-lo:to-lo], seg[from-slo:to-slo])
	}
	if !stitched {
		out = d.nanVals(int(hi - lo))
	}
	return out
}

// nanVals returns d.vals resized to n values, all NaN: a range stitched
// from several segments, or one that no segment holds.
func (d *decoder) nanVals(n int) []float64 {
	d.vals = grow(d.vals, n)
	for i := range d.vals {
		d.vals[i] = math.NaN()
	}
	return d.vals
}

// fill decodes the seqs [lo, hi) into a new piece of the slab.
func (d *decoder) fill(p *points, lo, hi uint64) []float64 {
	out := d.take(int(hi-lo), true)
	for i := range p.sealed {
		c := &p.sealed[i]
		if p.sealedEnd(i) <= lo || c.first >= hi {
			continue
		}
		d.readSealed(c, out, lo, hi)
	}
	d.readHead(p, out, lo, hi)
	return out
}

// take returns a new piece of the slab of n values, NaN when nan; without
// it the values are left from earlier Views, for a caller that writes
// every one.
func (d *decoder) take(n int, nan bool) []float64 {
	if cap(d.slab)-len(d.slab) < n {
		// Values handed out keep the old slab alive until the View ends.
		d.slab = make([]float64, 0, max(minSlab, 2*cap(d.slab), n))
	}
	out := d.slab[len(d.slab) : len(d.slab)+n : len(d.slab)+n]
	d.slab = d.slab[:len(d.slab)+n]
	if nan {
		for i := range out {
			out[i] = math.NaN()
		}
	}
	return out
}

// readHead decodes the head chunk and the newest value into out, which
// holds the seqs [lo, hi).
func (d *decoder) readHead(p *points, out []float64, lo, hi uint64) {
	if p.hasHead() && p.headLast >= lo && p.headFirst < hi {
		if p.xor == nil {
			readInts(p.headInts, p.headFirst, out, lo, hi)
		} else {
			d.read(p.xor.chunk, out, lo, hi)
		}
	}
	if p.hasNewest && p.newest >= lo && p.newest < hi {
		out[p.newest-lo] = p.newestVal
	}
}

// readSealed decodes sealed chunk c into out, which holds the seqs [lo, hi).
func (d *decoder) readSealed(c *sealedChunk, out []float64, lo, hi uint64) {
	if c.run.enc.ints() {
		end := readInts(c.bytes(), c.first, out, lo, hi)
		if c.run.enc != encInts {
			scale := c.run.enc.scale()
			for i := max(lo, c.first); i < end; i++ {
				out[i-lo] /= scale
			}
		}
		return
	}
	d.chunk.Reset(c.bytes())
	d.read(&d.chunk, out, lo, hi)
}

// firstValue is the first sample of a sealed chunk, read in place: a
// baseline steps over every chunk inside its range by its first value and
// summary. An XOR chunk (Prometheus' format, tsdb/docs/format/chunks.md)
// starts with its two-byte sample count, the first timestamp as a varint
// and the first value's 64 bits, byte-aligned, so no iterator is started
// for it.
func firstValue(c *sealedChunk) float64 {
	data := c.bytes()
	if c.run.enc.ints() {
		u, _ := binary.Uvarint(data)
		return float64(unzigzag(u>>1)) / c.run.enc.scale()
	}
	_, n := binary.Varint(data[xorHeaderBytes:])
	return math.Float64frombits(binary.BigEndian.Uint64(data[xorHeaderBytes+n:]))
}

// xorHeaderBytes is an XOR chunk's sample count.
const xorHeaderBytes = 2

func (d *decoder) read(c *chunkenc.XORChunk, out []float64, lo, hi uint64) {
	d.it = c.Iterator(d.it)
	for d.it.Next() == chunkenc.ValFloat {
		t, v := d.it.At()
		seq := uint64(t)
		if seq >= hi {
			return
		}
		if seq >= lo {
			out[seq-lo] = v
		}
	}
}
