package window

import (
	"math"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// counterIncrease is the reset-aware increase of one series of the replica
// over the seqs [lo, hi), skipping absent and non-finite points. It also
// returns the seqs of the first and last finite points and how many there
// were.
//
// A drop between two consecutive finite points is a reset. When the replica
// restarted at that scrape, its counters began again from zero and the
// post-reset value is the increase since the restart, as Prometheus takes
// it. A drop without a restart is one of several sources summed into the
// series starting over (the scraper adds the data-parallel ranks of a
// family up before the window sees it) or a glitch: the post-reset value is
// then mostly the other sources' lifetime totals, not an increase, so the
// step counts what the series grew per second over its steps without a
// reset, for the step's duration, and at most the post-reset value.
//
// Between resets the increase is the last value minus the first of each
// run without a drop (the sum of its steps, with one rounding), so a sealed
// chunk that lies wholly inside the range and never drops is read from its
// summary, undecoded.
func (v view) counterIncrease(rec *seriesRec, lo, hi uint64) (inc float64, first, last uint64, n int) {
	if end := rec.pts.end(); hi > end {
		hi = end
	}
	c := counterRuns{r: v.r}
	p := &rec.pts
	for s := range p.within(lo, hi) {
		from, to := max(lo, s.lo), min(hi, s.hi)
		var ch *sealedChunk
		if s.k >= 0 {
			ch = &p.sealed[s.k]
		}
		if ch != nil && lo <= s.lo && s.hi <= hi && !ch.run.broken() {
			if c.n > 0 && s.k > 0 && ch.run.abovePrevious() && c.prev <= p.sealed[s.k-1].run.lastVal {
				// Its first value is no drop from the run so far (it is at
				// least the chunk before's lastVal, which is at least the
				// run's last value), so stepping to it only counts it: the
				// chunk's bytes, a cache miss for each chunk a baseline
				// covers, are not read.
				c.skipTo(s.lo+uint64(ch.run.lastOff), ch.run.lastVal, int(ch.run.n))
				continue
			}
			c.step(s.lo, firstValue(ch))
			c.skipTo(s.lo+uint64(ch.run.lastOff), ch.run.lastVal, int(ch.run.n)-1)
			continue
		}
		if ch != nil && ch.run.thinned() && ch.run.enc.ints() {
			// A few dozen points over up to maxThinnedSpan scrapes:
			// stepped through in place, not laid out scrape by scrape.
			c.intSteps(ch, from, to)
			continue
		}
		seg := v.d.segment(p, s.k)
		switch {
		case seg.rising:
			c.rising(seg.vals, s.lo, from, to)
		case ch != nil && !ch.run.broken():
			c.run(seg.vals, s.lo, from, to)
		default:
			c.steps(seg.vals, s.lo, from, to)
		}
	}
	if c.partial == 0 {
		return c.finish(), c.first, c.last, c.n
	}
	return v.counterIncreaseEstimated(rec, lo, hi)
}

// counterRuns accumulates counterIncrease's runs point by point.
type counterRuns struct {
	r                *replica
	inc, start, prev float64
	first, last      uint64
	n, partial       int
}

func (c *counterRuns) step(seq uint64, x float64) {
	switch {
	case c.n == 0:
		c.first, c.start = seq, x
	case x >= c.prev:
	case c.r.restartedAt(seq):
		c.inc += c.prev - c.start
		c.inc += x
		c.start = x
	default:
		c.inc += c.prev - c.start
		c.start = x
		c.partial++
	}
	c.prev, c.last = x, seq
	c.n++
}

// skipTo continues the current run to x at seq over n more points that
// never drop.
func (c *counterRuns) skipTo(seq uint64, x float64, n int) {
	if n == 0 {
		return
	}
	c.prev, c.last = x, seq
	c.n += n
}

// steps feeds the finite values of seg (whose first value is at seq base)
// for the seqs [lo, hi).
func (c *counterRuns) steps(seg []float64, base, lo, hi uint64) {
	for seq := lo; seq < hi && seq-base < uint64(len(seg)); seq++ {
		if x := seg[seq-base]; finite(x) {
			c.step(seq, x)
		}
	}
}

// intSteps feeds the samples of integer chunk ch in the seqs [lo, hi), as
// steps does from decoded values. A chunk that never drops is fed as run
// does: its first sample in the range is a step and the rest continue the
// run, and when the range reaches the chunk's last sample that is its
// summary's, so the scan stops at lo. A baseline's oldest chunk is
// thinned, and most of a round's stepping was the samples after lo of
// every bucket of every histogram it reads.
func (c *counterRuns) intSteps(ch *sealedChunk, lo, hi uint64) {
	scale := ch.run.enc.scale()
	it := intSamples{data: ch.bytes(), seq: ch.first}
	if ch.run.broken() {
		for seq, v, ok := it.next(); ok && seq < hi; seq, v, ok = it.next() {
			if seq >= lo {
				c.step(seq, float64(v)/scale)
			}
		}
		return
	}
	before := 0
	for seq, v, ok := it.next(); ok && seq < hi; seq, v, ok = it.next() {
		if seq < lo {
			before++
			continue
		}
		c.step(seq, float64(v)/scale)
		if last := ch.first + uint64(ch.run.lastOff); hi > last {
			c.skipTo(last, ch.run.lastVal, int(ch.run.n)-before-1)
			return
		}
		n := 0
		var lastSeq uint64
		var lastV int64
		for seq, v, ok := it.next(); ok && seq < hi; seq, v, ok = it.next() {
			lastSeq, lastV = seq, v
			n++
		}
		c.skipTo(lastSeq, float64(lastV)/scale, n)
		return
	}
}

// run feeds the seqs [lo, hi) of seg (whose first value is at seq base),
// a piece of a chunk that never drops: its first finite value is a step,
// the rest continue the run to its last finite value.
func (c *counterRuns) run(seg []float64, base, lo, hi uint64) {
	hi = min(hi, base+uint64(len(seg)))
	n, first, last := 0, hi, hi
	for seq := lo; seq < hi; seq++ {
		if finite(seg[seq-base]) {
			if n == 0 {
				first = seq
			}
			last = seq
			n++
		}
	}
	if n == 0 {
		return
	}
	c.step(first, seg[first-base])
	c.skipTo(last, seg[last-base], n-1)
}

// rising feeds the seqs [lo, hi) of seg (whose first value is at seq
// base), values that are all finite and never drop (decoded.rising): as
// steps would, in constant time.
func (c *counterRuns) rising(seg []float64, base, lo, hi uint64) {
	hi = min(hi, base+uint64(len(seg)))
	if hi <= lo {
		return
	}
	c.step(lo, seg[lo-base])
	c.skipTo(hi-1, seg[hi-1-base], int(hi-lo)-1)
}

func (c *counterRuns) finish() float64 {
	if c.n == 0 {
		return 0
	}
	return c.inc + (c.prev - c.start)
}

// counterIncreaseEstimated is counterIncrease over a range with a drop
// without a restart: the runs as there, then the estimate for each such
// drop from the time covered by the steps without a reset.
func (v view) counterIncreaseEstimated(rec *seriesRec, lo, hi uint64) (inc float64, first, last uint64, n int) {
	r := v.r
	vals := v.d.values(&rec.pts, lo, hi)
	c := counterRuns{r: r}
	c.steps(vals, lo, lo, hi)
	inc, first, last, n = c.finish(), c.first, c.last, c.n
	steady, steadyInc := r.timeAt(last)-r.timeAt(first), 0.0
	var prev float64
	var prevSeq uint64
	started := false
	for seq := first; seq <= last; seq++ {
		x := vals[seq-lo]
		if !finite(x) {
			continue
		}
		switch {
		case !started:
		case x >= prev:
			steadyInc += x - prev
		default:
			steady -= r.timeAt(seq) - r.timeAt(prevSeq)
		}
		prev, prevSeq, started = x, seq, true
	}
	perNano := 0.0
	if steady > 0 {
		perNano = steadyInc / float64(steady)
	}
	started = false
	for seq := first; seq <= last; seq++ {
		x := vals[seq-lo]
		if !finite(x) {
			continue
		}
		if started && x < prev && !r.restartedAt(seq) {
			inc += math.Min(x, perNano*float64(r.timeAt(seq)-r.timeAt(prevSeq)))
		}
		prev, prevSeq, started = x, seq, true
	}
	return inc, first, last, n
}

// increase sums counterIncrease over the selected series that have at least
// two finite points, and returns the time span those points cover.
func (v view) increase(name string, ms []detect.Match, from, to time.Time) (inc float64, span time.Duration, ok bool) {
	lo, hi := v.seqRange(from, to)
	if hi-lo < 2 {
		return 0, 0, false
	}
	if a, ok := v.d.answers.increase(name, ms, lo, hi); ok {
		return a.val, a.span, a.ok
	}
	a := v.d.answers.question(name, ms, 0, lo, hi)
	a.val, a.span, a.ok = v.computeIncrease(name, ms, lo, hi)
	v.d.answers.putIncrease(a)
	return a.val, a.span, a.ok
}

// computeIncrease is increase over the seqs [lo, hi), not asked before.
func (v view) computeIncrease(name string, ms []detect.Match, lo, hi uint64) (inc float64, span time.Duration, ok bool) {
	var minSeq, maxSeq uint64
	for _, rec := range v.selected(name, ms) {
		d, first, last, n := v.counterIncrease(rec, lo, hi)
		if n < 2 {
			continue
		}
		if !ok || first < minSeq {
			minSeq = first
		}
		if !ok || last > maxSeq {
			maxSeq = last
		}
		inc += d
		ok = true
	}
	if !ok {
		return 0, 0, false
	}
	return inc, time.Duration(v.r.timeAt(maxSeq) - v.r.timeAt(minSeq)), true
}

func (v view) Increase(sel detect.Selector, from, to time.Time) (float64, bool) {
	inc, _, ok := v.increase(sel.Name, sel.Match, from, to)
	return inc, ok
}

func (v view) Rate(sel detect.Selector, from, to time.Time) (float64, bool) {
	inc, span, ok := v.increase(sel.Name, sel.Match, from, to)
	if !ok || span <= 0 {
		return 0, false
	}
	return inc / span.Seconds(), true
}
