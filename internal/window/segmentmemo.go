package window

import (
	"math"
	"math/bits"
	"unsafe"
)

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
