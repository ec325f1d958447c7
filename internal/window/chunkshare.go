package window

import (
	"bytes"
	"hash/maphash"
	"unsafe"
)

// chunkShare lets the series of one replica that seal (or thin) a chunk in
// the same ingest hold one copy of its bytes when they are equal. The
// buckets of a histogram seal together, and many of them hold the same
// samples: the buckets above every observation equal the +Inf bucket, which
// equals _count, and the buckets below every observation are zero. In the
// moving fixture three tenths of a replica's sealed bytes repeat another
// series' chunk sealed at the same scrape.
//
// Chunks share only when they start at the same seq and are thinned
// alike, and only between series that thin alike (the ingest keeps a
// table for each; a _sum or _count that has yet to learn whether it thins
// shares nothing): bytes shared with a series that thins differently
// would be rewritten by one of them once older than
// Options.HistogramFullResolution. Bytes
// that several series hold are counted by the replica (sharedChunks)
// once, for as long as any series holds them, and by no series: the
// accounting stays exact whichever holder drops them last (a series
// missing from some scrapes drops its chunks later than the others).
//
// The table lives for one ingest: a replica seals most of its chunks in
// one scrape every samplesPerChunk scrapes, and a table kept between them
// would cost more than it saves.
type chunkShare struct {
	seed    maphash.Seed
	held    *sharedChunks
	byChunk map[shareKey]madeChunk // nil until the first chunk
}

// shareKey is what a chunk is looked up by: its first seq, whether it is
// thinned, and a hash of its bytes (compared in full on a hit).
type shareKey struct {
	first   uint64
	thinned bool
	sum     uint64
}

// madeChunk is a chunk's bytes and the series entry that first held them
// (sealed chunk k of p) in this ingest.
type madeChunk struct {
	data []byte
	p    *points
	k    int
}

// share returns the bytes of a chunk equal to data, first and thinned
// that a series holds, made in this ingest; or, with shared false, data
// kept made by mk (called only then) for the next, to be held by sealed
// chunk k of p. When it shares, the bytes are the table's (sharedChunks):
// the entry that made them is marked shared (runSharedBytes) and its
// series no longer counts them, the caller marks the new holder's, and
// delta is what the replica's accounting grows by besides the caller's
// series (the table's entry, when the bytes are new to it). Two chunks
// whose hashes collide do not share: the later keeps its own bytes; nor
// do bytes whose maker no longer holds them (it thinned the chunk again
// in this ingest). A nil chunkShare shares nothing.
func (s *chunkShare) share(first uint64, thinned bool, data []byte, mk func([]byte) []byte, p *points, k int) (held []byte, shared bool, delta int) {
	if s == nil {
		return mk(data), false, 0
	}
	key := shareKey{first: first, thinned: thinned, sum: maphash.Bytes(s.seed, data)}
	if m, ok := s.byChunk[key]; ok {
		if !bytes.Equal(m.data, data) || m.k >= len(m.p.sealed) || m.p.sealed[m.k].data != unsafe.SliceData(m.data) {
			return mk(data), false, 0
		}
		if c := &m.p.sealed[m.k]; c.run.flags&runSharedBytes == 0 {
			// The maker's series passes the bytes to the table: the
			// replica's accounting keeps them, with the table's entry.
			c.run.flags |= runSharedBytes
			s.held.hold(c.data)
			delta = sharedEntryBytes
		}
		s.held.hold(unsafe.SliceData(m.data))
		return m.data, true, delta
	}
	if s.byChunk == nil {
		s.byChunk = make(map[shareKey]madeChunk)
	}
	held = mk(data)
	s.byChunk[key] = madeChunk{data: held, p: p, k: k}
	return held, false, 0
}

// table is the replica's shared chunks that s passes bytes to (nil for a
// nil chunkShare).
func (s *chunkShare) table() *sharedChunks {
	if s == nil {
		return nil
	}
	return s.held
}

// sharedChunks counts the holders of the chunk bytes that several series
// of a replica hold. The replica's accounting carries each such chunk's
// bytes and an entry of this table once: the bytes pass here from the
// series that made them when a second series holds them (chunkShare), and
// are freed with the last holder (release).
type sharedChunks struct {
	holders map[*byte]int32
}

// sharedEntryBytes is what the table spends on a chunk (map slot and
// control byte, rounded up).
const sharedEntryBytes = 24

// hold adds a holder to the bytes at data.
func (s *sharedChunks) hold(data *byte) {
	if s.holders == nil {
		s.holders = make(map[*byte]int32)
	}
	s.holders[data]++
}

// release lets go of one holder of c's bytes, when c holds shared bytes,
// and returns what the replica's accounting frees: the bytes and the
// table's entry, when it was the last holder. A nil table holds nothing.
func (s *sharedChunks) release(c *sealedChunk) int {
	if s == nil || c.run.flags&runSharedBytes == 0 {
		return 0
	}
	n := s.holders[c.data] - 1
	if n > 0 {
		s.holders[c.data] = n
		return 0
	}
	delete(s.holders, c.data)
	return int(c.run.size) + sharedEntryBytes
}
