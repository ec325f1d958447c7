package window

import (
	"math"
	"slices"
	"unsafe"
)

// thinBefore thins the sealed chunks whose samples all lie before seq
// (see thin), oldest first, and returns the change in the replica's
// accounting. buf is scratch for the decoded values, returned grown; a
// thinned chunk may share its bytes through sh (nil: not).
func (p *points) thinBefore(seq, slot uint64, buf []float64, sh *chunkShare) (delta int, _ []float64) {
	for k := 0; k < len(p.sealed); {
		if p.sealed[k].run.thinned() {
			k++
			continue
		}
		if p.sealedEnd(k) > seq {
			break
		}
		n := len(p.sealed)
		var d int
		d, buf = p.thin(k, slot, buf, sh)
		delta += d
		if len(p.sealed) == n {
			k++ // not merged into the chunk before: the next one is at k+1
		}
	}
	return delta, buf
}

// maxThinnedSpan is the most scrapes a thinned chunk spans: thin merges a
// chunk into the thinned one before it up to three chunks' worth (half
// an hour at 5 s), so that an hour of a bucket holds two or three thinned
// chunks of a few dozen points, not six of a dozen, whose 32-byte entries
// cost more than their points. Retention frees a chunk whole, so a
// thinned chunk outlives the window by up to this span.
const maxThinnedSpan = 3 * samplesPerChunk

// thin rewrites sealed chunk k with only the samples a counter's increase
// over a range needs at a resolution of slot seqs, so that a histogram
// bucket read an hour back costs about one sample a minute, not one a
// scrape. It keeps, in the chunk's seqs [first, end):
//   - the first sample (the chunk starts where it started, and its summary
//     still reads its first value);
//   - the first and the last finite sample;
//   - the first finite sample of every slot (seq/slot);
//   - both finite samples around every drop between consecutive finite
//     samples, so that a reset is seen at the scrape it happened at, with
//     the value before it.
//
// Between two kept samples the counter never drops, so an increase from
// one kept sample to another is what it was before the chunk was thinned;
// a range edge inside the chunk moves to the next kept sample. Non-finite
// samples other than the first are dropped (increases skip them). Thinning
// a thinned chunk keeps it as it is.
//
// When the chunk before k is thinned and the two span at most
// maxThinnedSpan scrapes, they are thinned as one chunk, over the thinned
// points of the first and all points of the second, when what is kept
// fits a chunk. Thinning is idempotent and thinning a span keeps what
// thinning its thinned start and the rest would, so the result is the
// rule's over the two chunks' seqs: what it keeps at the seam (the first
// sample of k, the last finite one of the chunk before) only where the
// rule asks for it.
func (p *points) thin(k int, slot uint64, buf []float64, sh *chunkShare) (delta int, _ []float64) {
	from := k
	if k > 0 && p.sealed[k-1].run.thinned() && p.sealedEnd(k)-p.sealed[k-1].first <= maxThinnedSpan {
		from = k - 1
	}
	for {
		var merged sealedChunk
		var ok bool
		merged, buf, ok = p.thinned(from, k, slot, buf)
		if !ok { // more than a chunk of points kept over two: thin k alone
			from = k
			continue
		}
		data, shared, shareDelta := sh.share(merged.first, true, merged.bytes(), keep, p, from)
		if shared {
			merged.data = unsafe.SliceData(data)
			merged.run.flags |= runSharedBytes
		}
		sharedFreed := 0
		for i := from; i <= k; i++ {
			delta -= p.sealed[i].ownBytes()
			sharedFreed += sh.table().release(&p.sealed[i])
		}
		delta += merged.ownBytes()
		p.sealed[from] = merged
		p.sealed = slices.Delete(p.sealed, from+1, k+1)
		p.linkRun(from)
		p.linkRun(from + 1)
		return delta + p.fitSealed() + shareDelta - sharedFreed, buf
	}
}

// thinned is sealed chunks from through k thinned as one (see thin); ok
// is false when what is kept is more than a chunk holds, which cannot
// happen to one chunk.
func (p *points) thinned(from, k int, slot uint64, buf []float64) (_ sealedChunk, _ []float64, ok bool) {
	first, end := p.sealed[from].first, p.sealedEnd(k)
	buf = grow(buf, int(end-first))
	for i := range buf {
		buf[i] = math.NaN()
	}
	var d decoder
	for i := from; i <= k; i++ {
		d.readSealed(&p.sealed[i], buf, first, end)
	}
	lastFinite := -1
	for i := len(buf) - 1; i >= 0; i-- {
		if finite(buf[i]) {
			lastFinite = i
			break
		}
	}
	var tp points
	// No slot is MaxUint64, so the first finite sample opens a slot; v <
	// prev is false while prev is NaN.
	prev, slotSeen := math.NaN(), uint64(math.MaxUint64)
	for i, v := range buf {
		seq := first + uint64(i)
		if !finite(v) {
			if i == 0 {
				tp.encode(seq, v, nil)
			}
			continue
		}
		keep := i == lastFinite || seq/slot != slotSeen || v < prev
		if !keep {
			// The next finite sample: keep this one when it drops after it.
			for j := i + 1; j <= lastFinite; j++ {
				if finite(buf[j]) {
					keep = buf[j] < v
					break
				}
			}
		}
		if keep {
			tp.encode(seq, v, nil)
		}
		slotSeen, prev = seq/slot, v
	}
	if tp.hasHead() {
		tp.seal(nil)
	}
	if len(tp.sealed) > 1 {
		return sealedChunk{}, buf, false
	}
	c := tp.sealed[0]
	c.run.flags |= runThinned
	return c, buf, true
}
