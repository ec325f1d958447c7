package slo

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// Sample is one objective's events on one model over one span: what a
// round counted (assess) or a backfill read.
type Sample struct {
	Objective string `json:"objective"`
	Model     string `json:"model"`
	Events    Events `json:"events"`
	// Boundary is the bucket boundary a latency objective was read at
	// (seconds); 0 for availability.
	Boundary float64 `json:"boundary_seconds,omitempty"`
}

// ring is a fixed run of buckets of one step, the newest overwriting the
// oldest: bucket k holds the events of (k*step, (k+1)*step].
type ring struct {
	step  time.Duration
	index []int64 // the bucket each slot holds; -1: none
	ev    []Events
}

func newRing(step, span time.Duration) *ring {
	n := int(span/step) + 1
	r := &ring{step: step, index: make([]int64, n), ev: make([]Events, n)}
	for i := range r.index {
		r.index[i] = -1
	}
	return r
}

// bucket is the index of the bucket an instant's events go to.
func (r *ring) bucket(t time.Time) int64 {
	return (t.UnixNano() - 1) / int64(r.step)
}

func (r *ring) slot(k int64) int {
	return int(((k % int64(len(r.index))) + int64(len(r.index))) % int64(len(r.index)))
}

func (r *ring) add(at time.Time, ev Events) {
	k := r.bucket(at)
	s := r.slot(k)
	switch {
	case r.index[s] == k:
		r.ev[s] = r.ev[s].Add(ev)
	case r.index[s] < k:
		r.index[s], r.ev[s] = k, ev
	}
	// An older bucket than the slot holds is past the memory: dropped.
}

// sum adds the buckets of the span d ending with now's bucket.
func (r *ring) sum(now time.Time, d time.Duration) Events {
	last := r.bucket(now)
	n := int64(d / r.step)
	var out Events
	for k := last - n + 1; k <= last; k++ {
		if s := r.slot(k); r.index[s] == k {
			out = out.Add(r.ev[s])
		}
	}
	return out
}

// prefix returns the sum of the buckets of span d ending with t's bucket,
// for any t at or before now, from one pass over the ring: a trend asks
// for every window at many instants.
func (r *ring) prefix(now time.Time) func(t time.Time, d time.Duration) Events {
	last := r.bucket(now)
	n := int64(len(r.index))
	first := last - n + 1
	cum := make([]Events, n+1) // cum[i]: buckets first .. first+i-1
	for i := range n {
		cum[i+1] = cum[i]
		if k := first + i; r.index[r.slot(k)] == k {
			cum[i+1] = cum[i+1].Add(r.ev[r.slot(k)])
		}
	}
	return func(t time.Time, d time.Duration) Events {
		hi := min(r.bucket(t), last) - first + 1
		if hi <= 0 {
			return Events{}
		}
		lo := max(hi-int64(d/r.step), 0)
		return Events{Good: cum[hi].Good - cum[lo].Good, Total: cum[hi].Total - cum[lo].Total}
	}
}

// memory is one objective's events on one model.
type memory struct {
	minutes, hours *ring
	// since is the instant the memory accounts from: its first span's
	// start (a backfill's start, or the round before the first it
	// recorded).
	since    time.Time
	boundary float64
}

type memKey struct{ objective, model string }

// Book is the long memory of every objective's events per model (not per
// replica): per-minute buckets over the policy's longest window and
// per-hour buckets over the objective's period. With the default policy
// and a 28-day period that is 4321 + 673 buckets of 24 bytes (two counts
// and the bucket's index), about 120 KB per objective and model. It is
// safe for concurrent use: the evaluation loop records into it, the
// assessment and the API read it.
type Book struct {
	mu  sync.Mutex
	cfg Config
	mem map[memKey]*memory
	// last is the end of the last span recorded: the next round counts
	// its events from there.
	last time.Time
}

// NewBook returns an empty memory for cfg's objectives.
func NewBook(cfg Config) *Book {
	return &Book{cfg: cfg, mem: map[memKey]*memory{}}
}

// Configure changes the objectives and the policy (hot reload). The
// memory of an objective whose events are counted the same way (same
// model, selector, kind and threshold) is kept; the rest starts afresh.
func (b *Book) Configure(cfg Config) {
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := map[string]string{} // old name -> key
	for _, o := range b.cfg.Objectives {
		keys[o.Name] = o.key()
	}
	old := b.mem
	b.mem = map[memKey]*memory{}
	for _, o := range cfg.Objectives {
		for k, m := range old {
			if keys[k.objective] != o.key() {
				continue
			}
			b.mem[memKey{o.Name, k.model}] = resized(m, cfg.Policy.Longest(), o.Period)
		}
	}
	b.cfg = cfg
}

// resized is m with rings of the spans given, keeping what fits.
func resized(m *memory, longest, period time.Duration) *memory {
	out := &memory{minutes: newRing(Resolution, longest), hours: newRing(PeriodResolution, period), since: m.since, boundary: m.boundary}
	for _, pair := range []struct{ from, to *ring }{{m.minutes, out.minutes}, {m.hours, out.hours}} {
		order := make([]int, 0, len(pair.from.index))
		for s, k := range pair.from.index {
			if k >= 0 {
				order = append(order, s)
			}
		}
		sort.Slice(order, func(a, c int) bool { return pair.from.index[order[a]] < pair.from.index[order[c]] })
		for _, s := range order {
			end := time.Unix(0, (pair.from.index[s]+1)*int64(pair.from.step))
			pair.to.add(end, pair.from.ev[s])
		}
	}
	return out
}

// Config is the configuration the book holds.
func (b *Book) Config() Config {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cfg
}

// Since is the end of the last span recorded (zero before the first):
// where the next round's events start.
func (b *Book) Since() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}

// Record adds the events of the span that ends at `at` and moves the
// book's end there.
func (b *Book) Record(at time.Time, samples []Sample) {
	b.mu.Lock()
	defer b.mu.Unlock()
	start := b.last
	if start.IsZero() || start.After(at) {
		start = at
	}
	b.record(start, at, samples)
	if at.After(b.last) {
		b.last = at
	}
}

func (b *Book) record(start, at time.Time, samples []Sample) {
	for _, s := range samples {
		o, ok := b.objective(s.Objective)
		if !ok || !s.Events.valid() {
			continue
		}
		k := memKey{s.Objective, s.Model}
		m := b.mem[k]
		if m == nil {
			m = &memory{minutes: newRing(Resolution, b.cfg.Policy.Longest()), hours: newRing(PeriodResolution, o.Period), since: start}
			b.mem[k] = m
		}
		if start.Before(m.since) {
			m.since = start
		}
		if s.Boundary > 0 {
			m.boundary = s.Boundary
		}
		m.minutes.add(at, s.Events)
		m.hours.add(at, s.Events)
	}
}

// Backfill adds events read from history, each sample over the step
// ending at its instant; a memory then reaches back to the first step
// it has events of. The book's end moves to `to` when it is later, so the
// first round counts its events from there.
func (b *Book) Backfill(to time.Time, step time.Duration, points map[time.Time][]Sample) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, at := range slices.SortedFunc(maps.Keys(points), func(a, c time.Time) int { return a.Compare(c) }) {
		b.record(at.Add(-step), at, points[at])
	}
	if to.After(b.last) {
		b.last = to
	}
}

func (b *Book) objective(name string) (Objective, bool) {
	for _, o := range b.cfg.Objectives {
		if o.Name == name {
			return o, true
		}
	}
	return Objective{}, false
}
