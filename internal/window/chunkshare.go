package window

import (
	"bytes"
	"hash/maphash"
)

// chunkShare lets the series of one replica that seal (or thin) a chunk in
// the same ingest hold one copy of its bytes when they are equal. The
// buckets of a histogram seal together, and many of them hold the same
// samples: the buckets above every observation equal the +Inf bucket, which
// equals _count, and the buckets below every observation are zero. In the
// moving fixture three tenths of a replica's sealed bytes repeat another
// series' chunk sealed at the same scrape.
//
// The first holder's accounting carries the bytes, the others' only their
// entries (sealedChunk.ownBytes). So that the holders free a chunk
// together, chunks share only when they start at the same seq and are
// thinned alike, and only between series that thin alike (the ingest
// keeps a table for each; a _sum or _count that has yet to learn whether
// it thins shares nothing). Equal bytes from the same seq are the same
// samples at the same seqs (the bytes hold the gaps). Retention drops a
// chunk, and thinning rewrites it, by where the holder's next sample is,
// which for series scraped alike is the same scrape. A holder that went
// without samples after the chunk (a series missing from some scrapes,
// or gone) drops it later; if the first holder dropped it already, the
// bytes go uncounted until then: for as long as that holder went without
// a sample, at most the retention, after which the sweep frees a series
// with no sample left.
//
// The table lives for one ingest: a replica seals most of its chunks in
// one scrape every samplesPerChunk scrapes, and a table kept between them
// would cost more than it saves.
type chunkShare struct {
	seed    maphash.Seed
	byChunk map[shareKey][]byte // nil until the first chunk
}

// shareKey is what a chunk is looked up by: its first seq, whether it is
// thinned, and a hash of its bytes (compared in full on a hit).
type shareKey struct {
	first   uint64
	thinned bool
	sum     uint64
}

// share returns the bytes of a chunk equal to data, first and thinned
// already held by a series in this ingest, or, with shared false, data
// kept made by mk (called only then) for the next. Two chunks whose
// hashes collide do not share: the later keeps its own bytes. A nil
// chunkShare shares nothing.
func (s *chunkShare) share(first uint64, thinned bool, data []byte, mk func([]byte) []byte) (held []byte, shared bool) {
	if s == nil {
		return mk(data), false
	}
	k := shareKey{first: first, thinned: thinned, sum: maphash.Bytes(s.seed, data)}
	if held, ok := s.byChunk[k]; ok {
		if bytes.Equal(held, data) {
			return held, true
		}
		return mk(data), false
	}
	if s.byChunk == nil {
		s.byChunk = make(map[shareKey][]byte)
	}
	held = mk(data)
	s.byChunk[k] = held
	return held, false
}
