package window

import (
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"unsafe"
	"weak"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// labelSet is the labels of one or more series. Every series of a store
// with the same labels, of any replica and any family, holds the same
// labelSet: the replicas of one model expose the same label sets (model
// name, ranks, le bounds), so a fleet keeps each once rather than once per
// series of every replica. It is read-only.
type labelSet struct {
	labels series.Labels
	// le is the "le" label parsed (parseLE): a bucket's upper bound, read
	// by every quantile, is parsed once for the fleet. NaN when the set
	// has none or it does not parse.
	le float64
}

// newLabelSet is a set of a copy of labels.
func newLabelSet(labels series.Labels) *labelSet {
	le, ok := parseLE(labels.Get("le"))
	if !ok {
		le = math.NaN()
	}
	return &labelSet{labels: slices.Clone(labels), le: le}
}

// bytes is what the set costs in the accounting: itself with its table
// entry and weak pointer, its labels and their strings.
func (s *labelSet) bytes() int {
	n := labelSetBytes + len(s.labels)*labelBytes
	for _, l := range s.labels {
		n += len(l.Name) + len(l.Value)
	}
	return n
}

// labelSets shares label sets across a store, keyed by a hash of the
// labels and compared in full. It holds them weakly: a set lives as long
// as a series refers to it, and its entry is purged once the garbage
// collector has freed it, so a target churning label values leaves nothing
// behind. Safe for concurrent use; a store makes series rarely (a
// replica's first scrape, a new label value), so one mutex suffices.
type labelSets struct {
	mu   sync.Mutex
	seed maphash.Seed
	sets map[uint64]weak.Pointer[labelSet]
	// purgeAt is the table size at which the entries of freed sets are
	// purged next: twice what was left at the last purge, so that the
	// table stays within about twice the live sets at an amortised
	// constant cost.
	purgeAt int
}

// Accounting sizes of a label set: its struct, and its table entry (map
// slot, and the runtime's weak handle and its record).
const labelSetBytes = int(unsafe.Sizeof(labelSet{})) + 64

const minPurge = 64

// get returns the store's set of labels, and whether this call made it
// (its caller then carries its cost in the accounting). labels is copied
// when a set is made, so the caller may reuse it. Two different label
// lists whose hashes meet get sets of their own, the later one unshared.
func (t *labelSets) get(labels series.Labels) (set *labelSet, made bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sets == nil {
		t.sets, t.seed = map[uint64]weak.Pointer[labelSet]{}, maphash.MakeSeed()
	}
	h := hashSeries(t.seed, "", labels)
	held := t.sets[h].Value() // nil: no entry, or its set was freed
	if held != nil && labelsEqual(held.labels, labels) {
		return held, false
	}
	set = newLabelSet(labels)
	if held != nil {
		return set, true // another list's hash: not shared
	}
	if len(t.sets) >= max(t.purgeAt, minPurge) {
		t.purge()
	}
	t.sets[h] = weak.Make(set)
	return set, true
}

// purge drops the entries of sets the garbage collector has freed.
func (t *labelSets) purge() {
	for h, wp := range t.sets {
		if wp.Value() == nil {
			delete(t.sets, h)
		}
	}
	t.purgeAt = 2 * len(t.sets)
}
