package window

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// replica is one replica's window. Its fields are guarded by mu.
type replica struct {
	mu    sync.RWMutex
	info  detect.Replica
	state detect.ScrapeState
	// failingSince is the first failed scrape of the current run of
	// failures (for ScrapeState.LastOutage).
	failingSince time.Time
	// probesFailing counts the health probes taken during that run.
	probesFailing int

	times  ring[int64]           // unix nanos of the successful scrapes held; seq = scrape number
	series map[uint64]*seriesRec // by identity hash
	// collided is the series whose hash another series holds in the
	// series map: 64-bit hashes of one replica's series all but never
	// meet, so they are kept apart rather than chained through every
	// record.
	collided map[uint64][]*seriesRec
	families map[string][]*seriesRec // by metric name
	nSeries  int
	seed     maphash.Seed // of the series hashes
	restarts []time.Time  // oldest first, within retention
	appends  int

	// sets is the store's label sets, shared with its other replicas.
	sets *labelSets
	// shared is the chunk bytes that several of its series hold.
	shared sharedChunks
	// bytes is the window's memory in the store's accounting: the series'
	// encoded points and records, the label sets they made, and the chunk
	// bytes they share.
	bytes int
	// thinBuf is points.thin's scratch.
	thinBuf []float64
	// order is the series of the last scrape's samples, by position. A
	// replica sends its series in the same order every scrape, so a sample
	// is first compared with the series at its position, and the series
	// map hashed into only when that is another; more than half of an
	// ingest was hashing. Cleared when sweep frees series, so it never
	// holds a freed one.
	order []*seriesRec
}

// Accounting sizes: a series record with its two map slots, and a label.
// The replica's scrape times add 8 bytes per scrape held.
const (
	seriesRecBytes = int(unsafe.Sizeof(seriesRec{})) + 48
	labelBytes     = int(unsafe.Sizeof(series.Label{}))
)

// seriesRec is one series of a replica and its points. Its yes-or-no
// facts (recFlags) are a byte of its points' (points.owner). A replica's
// records are a quarter of its window or more, each its own allocation: at
// 160 bytes a record is of the allocator's 160-byte class. A bucket's
// parsed bound is its label set's (labelSet.le), and series whose hashes
// meet are the replica's collided ones, not a chain through the records.
type seriesRec struct {
	name string
	set  *labelSet // its labels, shared (labelSets)
	pts  points
	last float64 // for restart detection: the newest finite value seen, if recHasLast
}

// recFlags are a series' yes-or-no facts.
type recFlags uint8

const (
	recHasLast recFlags = 1 << iota
	// recHasLE: a _bucket series whose "le" parses (labelSet.le).
	recHasLE
	// recCounterLike: the name ends _total/_count/_sum/_bucket (and it is
	// no gt/le gauge-histogram).
	recCounterLike
	// recThins: a histogram's counter, whose old chunks are thinned
	// (Options.HistogramFullResolution).
	recThins
	// recHistogramPart: a _sum or _count counter not yet known to be
	// part of a histogram. At its first scrape once the window reaches
	// further back than HistogramFullResolution, it is one when the
	// replica exposes the family's buckets: deciding when the series is
	// created would depend on the order of the exposition.
	recHistogramPart
	// recStartTime: a process start timestamp.
	recStartTime
	// recMadeSet: the series made its label set, so its accounting
	// carries the set's cost; a series that found its set made carries
	// none.
	recMadeSet
)

// is reports whether the series has every fact of f.
func (rec *seriesRec) is(f recFlags) bool { return rec.pts.owner&f == f }

// mark sets the facts of f to on.
func (rec *seriesRec) mark(f recFlags, on bool) {
	if on {
		rec.pts.owner |= f
	} else {
		rec.pts.owner &^= f
	}
}

func (rec *seriesRec) labels() series.Labels { return rec.set.labels }

func newReplica(name, target, kind string, sets *labelSets) *replica {
	return &replica{
		info:     detect.Replica{Name: name, Target: target, Kind: kind},
		series:   map[uint64]*seriesRec{},
		families: map[string][]*seriesRec{},
		seed:     maphash.MakeSeed(),
		sets:     sets,
	}
}

// dropOlderThan forgets scrapes and restarts before cut (unix nanos).
func (r *replica) dropOlderThan(cut int64) {
	for r.times.n > 0 {
		t, _ := r.times.at(r.times.first)
		if t >= cut {
			break
		}
		r.times.dropBefore(r.times.first + 1)
	}
	k := 0
	for k < len(r.restarts) && r.restarts[k].UnixNano() < cut {
		k++
	}
	if k > 0 {
		r.restarts = append(r.restarts[:0], r.restarts[k:]...)
	}
}

// sweep frees the chunks that fell out of the window and the series that
// hold no point inside it any more.
func (r *replica) sweep() {
	oldest := r.times.first
	removed := false
	for h, rec := range r.series {
		if r.retire(rec, oldest) {
			delete(r.series, h)
			removed = true
		}
	}
	for h, recs := range r.collided {
		kept := recs[:0]
		for _, rec := range recs {
			if r.retire(rec, oldest) {
				removed = true
			} else {
				kept = append(kept, rec)
			}
		}
		clear(recs[len(kept):])
		if len(kept) == 0 {
			delete(r.collided, h)
		} else {
			r.collided[h] = kept
		}
	}
	if removed {
		r.bytes -= 8 * cap(r.order)
		r.order = nil
	}
}

// retire frees the chunks of rec that fell out of the window before
// oldest, or rec itself when it holds no point inside it any more, and
// reports whether it freed rec (the caller takes it out of its map).
func (r *replica) retire(rec *seriesRec, oldest uint64) bool {
	if rec.pts.end() > oldest {
		r.bytes += rec.pts.dropBefore(oldest, &r.shared)
		return false
	}
	r.nSeries--
	r.bytes -= rec.ownBytes()
	for k := range rec.pts.sealed {
		r.bytes -= r.shared.release(&rec.pts.sealed[k])
	}
	fam := r.families[rec.name]
	for i, f := range fam {
		if f == rec {
			fam = append(fam[:i], fam[i+1:]...)
			break
		}
	}
	if len(fam) == 0 {
		delete(r.families, rec.name)
	} else {
		r.families[rec.name] = fam
	}
	return true
}

// ownBytes is what a series costs: its record and points, and its label
// set if it made it. A set outlives the series that made it while others
// share it, uncounted then: the sets a fleet shares are few, and a target
// whose label sets are its own, as a churning one's are, pays for every
// one.
func (rec *seriesRec) ownBytes() int {
	n := seriesRecBytes + rec.pts.heldBytes()
	if rec.is(recMadeSet) {
		n += rec.set.bytes()
	}
	return n
}

// newSeriesBytes bounds what admitting the sample's series would cost
// before its first chunk: its record and, as if no series shared it, its
// label set.
func newSeriesBytes(smp *series.Sample) int {
	return seriesRecBytes + (&labelSet{labels: smp.Labels}).bytes()
}

// lookup is the series of name and labels, whose hash is h, or nil.
func (r *replica) lookup(h uint64, name string, labels series.Labels) *seriesRec {
	if rec := r.series[h]; rec != nil && rec.name == name && labelsEqual(rec.labels(), labels) {
		return rec
	}
	for _, rec := range r.collided[h] {
		if rec.name == name && labelsEqual(rec.labels(), labels) {
			return rec
		}
	}
	return nil
}

// create makes the sample's series, whose hash is h: in the series map,
// or among the collided ones when another series holds h there.
func (r *replica) create(h uint64, smp *series.Sample) *seriesRec {
	set, made := r.sets.get(smp.Labels)
	rec := &seriesRec{name: smp.Name, set: set}
	rec.mark(recMadeSet, made)
	isGaugeHistogram := false
	for _, l := range set.labels {
		if l.Name == "gt" {
			isGaugeHistogram = true
		}
	}
	counterLike := !isGaugeHistogram && (strings.HasSuffix(smp.Name, "_total") ||
		strings.HasSuffix(smp.Name, "_count") || strings.HasSuffix(smp.Name, "_sum") ||
		strings.HasSuffix(smp.Name, "_bucket"))
	hasLE := strings.HasSuffix(smp.Name, "_bucket") && !math.IsNaN(set.le)
	rec.mark(recCounterLike, counterLike)
	rec.mark(recStartTime, strings.HasSuffix(smp.Name, "process_start_time_seconds"))
	rec.mark(recHasLE, hasLE)
	rec.mark(recThins, hasLE && counterLike)
	rec.mark(recHistogramPart, counterLike && (strings.HasSuffix(smp.Name, "_sum") || strings.HasSuffix(smp.Name, "_count")))
	if r.series[h] == nil {
		r.series[h] = rec
	} else {
		if r.collided == nil {
			r.collided = map[uint64][]*seriesRec{}
		}
		r.collided[h] = append(r.collided[h], rec)
	}
	r.families[rec.name] = append(r.families[rec.name], rec)
	r.nSeries++
	r.bytes += rec.ownBytes()
	return rec
}

// timeAt is the time (unix nanos) of the scrape seq.
func (r *replica) timeAt(seq uint64) int64 {
	t, _ := r.times.at(seq)
	return t
}

// restartedAt reports whether the replica restarted at the scrape seq.
func (r *replica) restartedAt(seq uint64) bool {
	t := r.timeAt(seq)
	for i := len(r.restarts) - 1; i >= 0; i-- { // a handful, newest last
		switch rt := r.restarts[i].UnixNano(); {
		case rt == t:
			return true
		case rt < t:
			return false
		}
	}
	return false
}
