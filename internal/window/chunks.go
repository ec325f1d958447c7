package window

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// samplesPerChunk is where a series' head chunk is sealed, Prometheus'
// own choice: decoding a range starts at a chunk boundary, and retention
// frees whole chunks, so a series holds at most one chunk past the window.
const samplesPerChunk = 120

// Accounting sizes: an XOR head chunk with its appender (an unexported
// type of six words), and one entry of the sealed list.
const (
	xorHeadBytes = int(unsafe.Sizeof(xorHead{})) + int(unsafe.Sizeof(chunkenc.XORChunk{})) + 48
	sealedBytes  = int(unsafe.Sizeof(sealedChunk{}))
)

// sealedChunk is a full chunk, its bytes trimmed to their length: XOR, or
// integer deltas when every value is an integer or a short decimal
// (run.enc). Its samples end before the next chunk's (or the unencoded
// value's) first seq.
//
// A replica holds thousands of entries (an hour of a bucket series is
// seven), so an entry is 32 bytes, not 48: the bytes are held by a
// pointer to the first, and their length lives in the summary's padding
// (run.size), where a slice would spend 16 bytes more on a length and a
// capacity.
type sealedChunk struct {
	first uint64 // scrape seq of its first sample
	data  *byte  // run.size bytes
	run   run
}

// newSealedChunk holds data, which must not be empty, nor change after. A
// chunk's bytes are far below 64 KiB: at most about 20 bytes for each of
// its samplesPerChunk samples.
func newSealedChunk(first uint64, data []byte, r run) sealedChunk {
	if len(data) == 0 || len(data) > math.MaxUint16 {
		panic(fmt.Sprintf("window: a sealed chunk of %d bytes", len(data)))
	}
	r.size = uint16(len(data))
	return sealedChunk{first: first, data: unsafe.SliceData(data), run: r}
}

// bytes are the chunk's encoded samples. Read only.
func (c *sealedChunk) bytes() []byte { return unsafe.Slice(c.data, c.run.size) }

// ownBytes is what the chunk's bytes add to its series' accounting:
// nothing when several series hold them, as the replica counts them then
// (sharedChunks).
func (c *sealedChunk) ownBytes() int {
	if c.run.flags&runSharedBytes != 0 {
		return 0
	}
	return int(c.run.size)
}

// keep is chunkShare.share's maker for bytes that are already the
// chunk's own.
func keep(data []byte) []byte { return data }

// run summarises a chunk for counter increases when its values run
// without a drop: its first value is finite (the chunk's first sample,
// read without decoding the rest), and the last finite value, its seq (an
// offset from the chunk's first) and how many finite values there are.
// A counter's increase over a range that covers such a chunk whole needs
// only these (view.counterIncrease), so a one-hour baseline decodes its
// edge chunks instead of every chunk. Sixteen bytes per chunk.
type run struct {
	lastVal float64
	lastOff uint16
	n       uint8
	flags   runFlags
	// enc: how the chunk's bytes hold its values. It lives here, in the
	// summary's padding, so it costs no byte.
	enc encoding
	// size is the length of a sealed chunk's bytes (sealedChunk.data),
	// in the last two bytes of padding.
	size uint16
}

// runFlags are a chunk summary's yes-or-no facts, in one byte of padding.
type runFlags uint8

const (
	// runBroken: a non-finite first value, a drop, or an offset past
	// uint16: decode instead.
	runBroken runFlags = 1 << iota
	// runThinned: the chunk was rewritten by points.thin.
	runThinned
	// runAbovePrevious: the chunk's first value is at least the lastVal
	// of the sealed chunk before it (points.linkRun), so a counter's run
	// that reached no higher than that continues into it without a drop,
	// and the chunk's bytes need not be read for its first value.
	runAbovePrevious
	// runSharedBytes: the chunk's bytes are held by several series and
	// counted by the replica's sharedChunks, not by the series
	// (chunkShare).
	runSharedBytes
)

func (r *run) broken() bool        { return r.flags&runBroken != 0 }
func (r *run) thinned() bool       { return r.flags&runThinned != 0 }
func (r *run) abovePrevious() bool { return r.flags&runAbovePrevious != 0 }

// encoding is how a sealed chunk's bytes hold its values.
type encoding uint8

const (
	encXOR  encoding = iota // Prometheus' XOR chunk
	encInts                 // integer deltas (appendInt)
	// encInts+k, k from 1 to maxDecimals: integer deltas of the values
	// times 10^k (decimalScale).
)

// ints reports whether the bytes are integer deltas.
func (e encoding) ints() bool { return e >= encInts }

// scale is what the integers decoded from the bytes are divided by.
func (e encoding) scale() float64 { return pow10[e-encInts] }

// maxDecimals is the most decimals a chunk of floats is stored as integers
// for. The current SGLang release exposes several float gauges rounded to
// two or four places (token_usage 0.41, gen_throughput 1184.52,
// new_token_ratio 0.4213 in sglang-current-full.prom).
const maxDecimals = 6

var pow10 = [maxDecimals + 1]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6}

// decimalScale is the fewest decimals k (1 to maxDecimals) with which every
// value of vals is an integer m that gives the value back exactly as
// m / 10^k: both are the double nearest to the same fraction, which is
// what parsing the value's text gave. ok is false for values that are no
// short decimals (a ratio at full precision, NaN, -0).
func decimalScale(vals []float64) (k int, ok bool) {
	for k = 1; k <= maxDecimals; k++ {
		ok = true
		for _, v := range vals {
			if m := math.Round(v * pow10[k]); !isInt(m) || m/pow10[k] != v {
				ok = false
				break
			}
		}
		if ok {
			return k, true
		}
	}
	return 0, false
}

// add extends the summary by the value at off (non-finite values after
// the first are skipped, as counterIncrease skips them).
func (r *run) add(off uint64, v float64) {
	switch {
	case r.broken():
	case off > math.MaxUint16 || (off == 0 && !finite(v)):
		r.flags |= runBroken
	case !finite(v):
	case r.n > 0 && v < r.lastVal:
		r.flags |= runBroken
	default:
		r.lastVal, r.lastOff = v, uint16(off)
		r.n++ // at most samplesPerChunk
	}
}

// points is one series' values, aligned with its replica's scrape sequence:
// the value at seq k was recorded at the replica's k-th successful scrape.
// The head chunk is integer deltas (the encoding of a sealed integer chunk,
// below) while every value in it is an integer, which is what counters are;
// at the first other value it is re-encoded as an XOR chunk with seq as the
// timestamp (consecutive scrapes give a delta-of-delta of 0, about one bit).
// Real scrape times are kept once per replica. A scrape the series missed
// has no sample and reads as NaN. The newest value stays unencoded until the
// next scrape, so that a duplicate sample in one scrape overwrites it and
// Last needs no decoding.
type points struct {
	sealed    []sealedChunk // oldest first
	headInts  []byte        // the head's samples while all are integers
	headInt   int64         // the last of them
	headStep  int64         // its step from the one before (0 after the first)
	xor       *xorHead      // the head, once a value was not an integer
	headFirst uint64        // seq of the head chunk's first sample
	headLast  uint64        // seq of the head chunk's last sample
	newest    uint64        // seq of the unencoded newest value
	newestVal float64
	headRun   run // the head chunk's summary, sealed with it
	// Side by side, so that they share one word.
	headN     uint16 // samples in the head; 0: no head
	hasNewest bool
	// owner is the yes-or-no facts of the series these points are (a
	// seriesRec's flags), in a byte the word has to spare: a record then
	// fits the allocator's 160-byte class, not its 192 one.
	owner recFlags
	// headZeros: how many of the integer head's last samples kept their
	// step, each headZeroGap after the one before (appendIntSample).
	headZeros   uint16
	headZeroGap uint16
}

// xorHead is a head chunk in Prometheus' XOR encoding and its appender.
type xorHead struct {
	chunk *chunkenc.XORChunk
	app   chunkenc.Appender
}

// hasHead reports whether the series has a head chunk.
func (p *points) hasHead() bool { return p.headN > 0 }

// put records v at seq; seqs only grow. A chunk it seals may share its
// bytes through sh (nil: not). It returns the change in the replica's
// accounting: the series' bytes held, and the shared chunks' table.
func (p *points) put(seq uint64, v float64, sh *chunkShare) (delta int) {
	if p.hasNewest && p.newest == seq {
		p.newestVal = v
		return 0
	}
	if p.hasNewest {
		delta = p.encode(p.newest, p.newestVal, sh)
	}
	p.newest, p.newestVal, p.hasNewest = seq, v, true
	return delta
}

// encode appends one sample to the head chunk, sealing it when full (see
// seal for sh), and returns what put does.
func (p *points) encode(seq uint64, v float64, sh *chunkShare) int {
	delta := -p.headBytes()
	if !p.hasHead() {
		p.headFirst, p.headInts, p.headInt, p.headStep = seq, nil, 0, 0
		p.headRun, p.headZeros = run{}, 0
	}
	switch {
	case p.xor == nil && isInt(v):
		first := !p.hasHead()
		step := int64(v) - p.headInt
		p.appendIntSample(seq-p.headLast, first, step-p.headStep)
		p.headInt = int64(v)
		if !first {
			p.headStep = step
		}
	default:
		if p.xor == nil {
			p.toXOR()
		}
		p.xor.app.Append(0, int64(seq), v)
	}
	p.headN++
	p.headLast = seq
	p.headRun.add(seq-p.headFirst, v)
	if p.headN >= samplesPerChunk {
		return delta + p.seal(sh)
	}
	return delta + p.headBytes()
}

// seal moves the full head chunk to the sealed list, its bytes trimmed, or
// shared with an equal chunk another series sealed through sh (nil: not).
// It returns the change in the replica's accounting besides the head's
// bytes: the list and the chunk's own bytes, and what sharing added
// (chunkShare.share).
func (p *points) seal(sh *chunkShare) (delta int) {
	var data []byte
	own := slices.Clone[[]byte] // the head's bytes are reused or grown: copied
	switch {
	case p.xor == nil:
		data = p.headInts
		p.headRun.enc = encInts
	default:
		var k int
		if data, k = p.decimalHead(); data != nil {
			p.headRun.enc = encInts + encoding(k)
			own = keep
		} else {
			data = p.xor.chunk.Bytes()
		}
	}
	data, shared, shareDelta := sh.share(p.headFirst, false, data, own, p, len(p.sealed))
	data = slices.Clip(data)
	if shared {
		p.headRun.flags |= runSharedBytes
	}
	delta = shareDelta - cap(p.sealed)*sealedBytes
	if len(p.sealed) == cap(p.sealed) {
		// Room for this entry only, not doubling: a series holds a few
		// entries, and fitSealed gives back what a drop or merge frees.
		p.sealed = append(make([]sealedChunk, 0, len(p.sealed)+1), p.sealed...)
	}
	c := newSealedChunk(p.headFirst, data, p.headRun)
	p.sealed = append(p.sealed, c)
	p.linkRun(len(p.sealed) - 1)
	p.headN, p.headInts, p.xor = 0, nil, nil
	return delta + cap(p.sealed)*sealedBytes + c.ownBytes()
}

// decimalHead returns the XOR head re-encoded as the integer deltas of its
// values times 10^k when they are all short decimals (decimalScale), or
// nil. A float gauge rounded to two places then costs about what a counter
// does, not the ≈4.8 bytes a point of XOR.
func (p *points) decimalHead() (data []byte, k int) {
	var seqs []uint64
	var vals []float64
	it := p.xor.chunk.Iterator(nil)
	for it.Next() == chunkenc.ValFloat {
		t, v := it.At()
		seqs, vals = append(seqs, uint64(t)), append(vals, v)
	}
	k, ok := decimalScale(vals)
	if !ok {
		return nil, 0
	}
	var ints points
	for i, v := range vals {
		ints.encode(seqs[i], math.Round(v*pow10[k]), nil)
	}
	if ints.hasHead() {
		ints.seal(nil)
	}
	return ints.sealed[0].bytes(), k
}

// toXOR re-encodes the integer head (possibly empty) as an XOR chunk.
func (p *points) toXOR() {
	c := chunkenc.NewXORChunk()
	app, _ := c.Appender() // an empty XOR chunk always gives an appender
	it := intSamples{data: p.headInts, seq: p.headFirst}
	for seq, v, ok := it.next(); ok; seq, v, ok = it.next() {
		app.Append(0, int64(seq), float64(v))
	}
	p.xor, p.headInts = &xorHead{chunk: c, app: app}, nil
}

// heldBytes is what the series' points hold in the store's accounting:
// the sealed list, the sealed chunks' bytes not shared (shared ones the
// replica counts), and the head chunk.
func (p *points) heldBytes() int {
	n := cap(p.sealed)*sealedBytes + p.headBytes()
	for k := range p.sealed {
		n += p.sealed[k].ownBytes()
	}
	return n
}

// headBytes is what the head chunk holds in the store's accounting.
func (p *points) headBytes() int {
	switch {
	case !p.hasHead():
		return 0
	case p.xor != nil:
		return xorHeadBytes + cap(p.xor.chunk.Bytes())
	default:
		return cap(p.headInts)
	}
}

// linkRun sets runAbovePrevious of sealed chunk k (if there is one) from
// its first value and the chunk before's lastVal. Sealing a chunk and
// rewriting one (thin) call it for the chunks whose own or previous
// summary changed; retention drops chunks from the front, which leaves the
// rest as they were, and the first chunk's flag is never read.
func (p *points) linkRun(k int) {
	if k <= 0 || k >= len(p.sealed) {
		return
	}
	c := &p.sealed[k]
	c.run.flags &^= runAbovePrevious
	if x := firstValue(c); finite(x) && x >= p.sealed[k-1].run.lastVal {
		c.run.flags |= runAbovePrevious
	}
}

// sealedEnd is the seq before which sealed chunk k's samples all lie.
func (p *points) sealedEnd(k int) uint64 {
	switch {
	case k+1 < len(p.sealed):
		return p.sealed[k+1].first
	case p.hasHead():
		return p.headFirst
	default:
		return p.newest // a chunk is sealed while encoding the value before
	}
}

// dropBefore frees the sealed chunks whose samples are all older than seq,
// letting go of the shared bytes they held in held (nil: none). It returns
// the change in the replica's accounting.
func (p *points) dropBefore(seq uint64, held *sharedChunks) int {
	k := 0
	freed, sharedFreed := 0, 0
	for k < len(p.sealed) && p.sealedEnd(k) <= seq {
		freed += p.sealed[k].ownBytes()
		sharedFreed += held.release(&p.sealed[k])
		k++
	}
	if k == 0 {
		return 0
	}
	p.sealed = slices.Delete(p.sealed, 0, k)
	return p.fitSealed() - freed - sharedFreed
}

// fitSealed moves the sealed list to an array of its length when chunks
// were dropped or merged, and returns the change in bytes held. A series
// holds a few entries of 32 bytes, and its list is one shorter than its
// array about half the time (the chunk retention drops and the one sealed
// next are scrapes apart), a fifth of a replica's entries: copying a few
// entries once per chunk costs less.
func (p *points) fitSealed() int {
	if len(p.sealed) == cap(p.sealed) {
		return 0
	}
	before := cap(p.sealed)
	if len(p.sealed) == 0 {
		p.sealed = nil
	} else {
		p.sealed = slices.Clone(p.sealed)
	}
	return (cap(p.sealed) - before) * sealedBytes
}

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

// end is one past the seq of the newest sample (0 when empty).
func (p *points) end() uint64 {
	if !p.hasNewest {
		return 0
	}
	return p.newest + 1
}

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

// segmentMemo holds the segments a View decoded: a piece of one series
// decoded as a unit, a sealed chunk or the head chunk with the unencoded
// newest value (memoKey). A round looks segments up about four times as
// often as it decodes one, about 800 times a replica, so the table is
// open-addressed on an address (which the collector never moves) rather
// than a Go map, whose hashing of the key was a tenth of a round; and it
// is emptied slot by slot, only those filled.
type segmentMemo struct {
	slots []memoSlot // a power of two long, at most half filled
	shift uint       // 64 - log2(len(slots))
	used  []int      // the filled slots
}

type memoSlot struct {
	key memoKey // at nil: empty
	seg decoded
}

// memoKey names a segment by what its values are decoded from. A sealed
// chunk is named by its bytes, not by its series: the buckets of a
// histogram that hold equal chunks hold one copy of the bytes
// (chunkShare), and a round reads them one after the other, so a third of
// the sealed chunks a round decoded were bytes it had decoded already. The
// same bytes decode to the same values when they start at the same seq,
// are read in the same encoding and span as many seqs (a gap before the
// next chunk is NaN).
type memoKey struct {
	at    unsafe.Pointer // the sealed chunk's bytes, or the series (points) of a head
	first uint64         // the sealed chunk's first seq; 0 for a head
	shape uint64         // the sealed chunk's encoding and span (sealedKey); headShape for a head
}

// headShape is no sealed chunk's shape: a span is below 2^32.
const headShape = math.MaxUint64

func headKey(p *points) memoKey { return memoKey{at: unsafe.Pointer(p), shape: headShape} }

func sealedKey(p *points, k int) memoKey {
	c := &p.sealed[k]
	return memoKey{at: unsafe.Pointer(c.data), first: c.first, shape: uint64(c.run.enc)<<32 | (p.sealedEnd(k) - c.first)}
}

// segmentKey is sealedKey for k >= 0, headKey for k = -1.
func segmentKey(p *points, k int) memoKey {
	if k < 0 {
		return headKey(p)
	}
	return sealedKey(p, k)
}

// slot is where probing for key starts: Fibonacci hashing of the
// address, offset by the first seq.
func (m *segmentMemo) slot(key memoKey) int {
	x := uint64(uintptr(key.at)) + (key.first+1)*0x9E3779B97F4A7C15
	return int((x * 0x9E3779B97F4A7C15) >> m.shift)
}

func (m *segmentMemo) get(key memoKey) (decoded, bool) {
	if len(m.slots) == 0 {
		return decoded{}, false
	}
	mask := len(m.slots) - 1
	for i := m.slot(key); ; i = (i + 1) & mask {
		s := &m.slots[i]
		if s.key.at == nil {
			return decoded{}, false
		}
		if s.key == key {
			return s.seg, true
		}
	}
}

// put adds a segment that get did not find.
func (m *segmentMemo) put(key memoKey, seg decoded) {
	if 2*(len(m.used)+1) > len(m.slots) {
		m.grow()
	}
	mask := len(m.slots) - 1
	i := m.slot(key)
	for m.slots[i].key.at != nil {
		i = (i + 1) & mask
	}
	m.slots[i] = memoSlot{key: key, seg: seg}
	m.used = append(m.used, i)
}

func (m *segmentMemo) grow() {
	old := m.slots
	n := max(256, 2*len(old))
	m.slots, m.shift = make([]memoSlot, n), uint(64-bits.Len(uint(n-1)))
	m.used = m.used[:0]
	for _, s := range old {
		if s.key.at != nil {
			m.put(s.key, s.seg)
		}
	}
}

// reset empties the table, keeping its memory, and lets go of the View's
// series, bytes and values.
func (m *segmentMemo) reset() {
	for _, i := range m.used {
		m.slots[i] = memoSlot{}
	}
	m.used = m.used[:0]
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
			out = grow(d.vals, int(hi-lo))
			d.vals = out
			for i := range out {
				out[i] = math.NaN()
			}
			stitched = true
		}
		from, to := max(lo, slo), min(hi, shi)
		copy(out[from-lo:to-lo], seg[from-slo:to-slo])
	}
	if !stitched {
		out = grow(d.vals, int(hi-lo))
		d.vals = out
		for i := range out {
			out[i] = math.NaN()
		}
	}
	return out
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
