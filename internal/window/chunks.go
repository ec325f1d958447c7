package window

import (
	"fmt"
	"math"
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

// end is one past the seq of the newest sample (0 when empty).
func (p *points) end() uint64 {
	if !p.hasNewest {
		return 0
	}
	return p.newest + 1
}
