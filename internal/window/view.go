package window

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// view is the detect.Window of one replica. It is only valid while the
// replica's read lock is held (inside Store.View), and decodes ranges into
// the scratch d, so it is not for concurrent use.
type view struct {
	r *replica
	d *decoder
}

var (
	_ detect.Window        = view{}
	_ detect.ScrapeCounter = view{}
	_ detect.PointFinder   = view{}
)

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func parseLE(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

func (v view) Replica() detect.Replica    { return v.r.info }
func (v view) Scrape() detect.ScrapeState { return v.r.state }

// seqRange returns the scrape seqs [lo, hi) whose time t satisfies
// from < t <= to.
func (v view) seqRange(from, to time.Time) (lo, hi uint64) {
	lo, hi = v.seqAfter(from.UnixNano()), v.seqAfter(to.UnixNano())
	return lo, max(lo, hi)
}

// seqAfter is the seq of the first scrape held after t (unix nanos), or
// the end of the scrapes. A round asks a replica about a handful of times
// (now, the starts of the ranges and baselines) hundreds of times, so the
// View remembers the last few answers (decoder.seqs).
func (v view) seqAfter(t int64) uint64 {
	c := &v.d.seqs
	for i := range min(c.next, len(c.nanos)) {
		if c.nanos[i] == t {
			return c.seq[i]
		}
	}
	ts := &v.r.times
	seq := ts.first + uint64(sort.Search(ts.n, func(i int) bool { x, _ := ts.at(ts.first + uint64(i)); return x > t }))
	k := c.next % len(c.nanos)
	c.nanos[k], c.seq[k], c.next = t, seq, c.next+1
	return seq
}

func (v view) timeOf(seq uint64) int64 {
	t, _ := v.r.times.at(seq)
	return t
}

// selected returns the series of the selector's family that match.
func (v view) selected(name string, ms []detect.Match) []*seriesRec {
	fam := v.r.families[name]
	if len(ms) == 0 {
		return fam
	}
	out := make([]*seriesRec, 0, len(fam))
	for _, rec := range fam {
		if matchesAll(rec.labels(), ms) {
			out = append(out, rec)
		}
	}
	return out
}

// latest is the seq of the newest successful scrape.
func (v view) latest() (uint64, bool) {
	if v.r.times.n == 0 {
		return 0, false
	}
	return v.r.times.end() - 1, true
}

func (v view) Last(sel detect.Selector) (float64, bool) {
	seq, ok := v.latest()
	if !ok {
		return 0, false
	}
	sum, any := 0.0, false
	for _, rec := range v.selected(sel.Name, sel.Match) {
		// A series absent from the newest scrape is not held at seq: stale.
		if p := &rec.pts; p.hasNewest && p.newest == seq && finite(p.newestVal) {
			sum = combine(sel.Combine, sum, p.newestVal, any)
			any = true
		}
	}
	return sum, any
}

func (v view) Has(name string) bool {
	seq, ok := v.latest()
	if !ok {
		return false
	}
	for _, rec := range v.r.families[name] {
		if rec.pts.end() == seq+1 {
			return true
		}
	}
	return false
}

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
	for k := 0; k < len(p.sealed); k++ {
		ch := &p.sealed[k]
		slo, shi := ch.first, p.sealedEnd(k)
		if shi <= lo || slo >= hi {
			continue
		}
		if lo <= slo && shi <= hi && !ch.run.broken() {
			if c.n > 0 && k > 0 && ch.run.abovePrevious() && c.prev <= p.sealed[k-1].run.lastVal {
				// Its first value is no drop from the run so far (it is at
				// least the chunk before's lastVal, which is at least the
				// run's last value), so stepping to it only counts it: the
				// chunk's bytes, a cache miss for each chunk a baseline
				// covers, are not read.
				c.skipTo(slo+uint64(ch.run.lastOff), ch.run.lastVal, int(ch.run.n))
				continue
			}
			c.step(slo, firstValue(ch))
			c.skipTo(slo+uint64(ch.run.lastOff), ch.run.lastVal, int(ch.run.n)-1)
			continue
		}
		if ch.run.thinned() && ch.run.enc.ints() {
			// A few dozen points over up to maxThinnedSpan scrapes:
			// stepped through in place, not laid out scrape by scrape.
			c.intSteps(ch, max(lo, slo), min(hi, shi))
			continue
		}
		seg := v.d.segment(p, k)
		switch {
		case seg.rising:
			c.rising(seg.vals, slo, max(lo, slo), min(hi, shi))
		case !ch.run.broken():
			c.run(seg.vals, slo, max(lo, slo), min(hi, shi))
		default:
			c.steps(seg.vals, slo, max(lo, slo), min(hi, shi))
		}
	}
	if slo, shi := p.bounds(-1); shi > lo && slo < hi {
		if seg := v.d.segment(p, -1); seg.rising {
			c.rising(seg.vals, slo, max(lo, slo), min(hi, shi))
		} else {
			c.steps(seg.vals, slo, max(lo, slo), min(hi, shi))
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
	return inc, time.Duration(v.timeOf(maxSeq) - v.timeOf(minSeq)), true
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

// combine merges x into acc (acc is meaningless while !started).
func combine(c detect.Combine, acc, x float64, started bool) float64 {
	if !started {
		return x
	}
	if c == detect.CombineMax {
		return math.Max(acc, x)
	}
	return acc + x
}

// eachScrape calls fn with the per-scrape sum (or max, see detect.Combine) over the selected series, for
// every scrape in the range at which at least one of them had a finite value.
func (v view) eachScrape(sel detect.Selector, from, to time.Time, fn func(sum float64)) {
	recs := v.selected(sel.Name, sel.Match)
	if len(recs) == 0 {
		return
	}
	lo, hi := v.seqRange(from, to)
	if hi <= lo {
		return
	}
	d := v.d
	d.acc, d.any = grow(d.acc, int(hi-lo)), grow(d.any, int(hi-lo))
	clear(d.any)
	// Series by series, each seq's combination in the order of recs, as a
	// scrape-by-scrape loop would add them.
	for _, rec := range recs {
		for i, x := range d.values(&rec.pts, lo, hi) {
			if finite(x) {
				d.acc[i] = combine(sel.Combine, d.acc[i], x, d.any[i])
				d.any[i] = true
			}
		}
	}
	for i, ok := range d.any {
		if ok {
			fn(d.acc[i])
		}
	}
}

func (v view) Avg(sel detect.Selector, from, to time.Time) (float64, bool) {
	total, n := 0.0, 0
	v.eachScrape(sel, from, to, func(s float64) { total += s; n++ })
	if n == 0 {
		return 0, false
	}
	return total / float64(n), true
}

func (v view) Max(sel detect.Selector, from, to time.Time) (float64, bool) {
	if recs := v.selected(sel.Name, sel.Match); len(recs) == 1 {
		lo, hi := v.seqRange(from, to)
		return v.maxOf(recs[0], lo, hi)
	}
	m, ok := math.Inf(-1), false
	v.eachScrape(sel, from, to, func(s float64) { m = math.Max(m, s); ok = true })
	if !ok {
		return 0, false
	}
	return m, true
}

// Present implements detect.PointFinder. A sealed chunk that starts
// inside the range with a finite value answers without being decoded.
func (v view) Present(sel detect.Selector, from, to time.Time) bool {
	lo, hi := v.seqRange(from, to)
	if hi <= lo {
		return false
	}
	for _, rec := range v.selected(sel.Name, sel.Match) {
		if v.hasFinite(rec, lo, hi) {
			return true
		}
	}
	return false
}

// hasFinite reports whether the series has a finite value in the seqs
// [lo, hi).
func (v view) hasFinite(rec *seriesRec, lo, hi uint64) bool {
	p := &rec.pts
	for k := range p.sealed {
		ch := &p.sealed[k]
		slo, shi := ch.first, p.sealedEnd(k)
		if shi <= lo || slo >= hi {
			continue
		}
		if slo >= lo && finite(firstValue(ch)) {
			return true
		}
		if anyFinite(v.d.segmentValues(p, k), slo, max(lo, slo), min(hi, shi)) {
			return true
		}
	}
	if slo, shi := p.bounds(-1); shi > lo && slo < hi {
		return anyFinite(v.d.segmentValues(p, -1), slo, max(lo, slo), min(hi, shi))
	}
	return false
}

// anyFinite reports whether seg (whose first value is at seq base) has a
// finite value in the seqs [lo, hi).
func anyFinite(seg []float64, base, lo, hi uint64) bool {
	for seq := lo; seq < hi && seq-base < uint64(len(seg)); seq++ {
		if finite(seg[seq-base]) {
			return true
		}
	}
	return false
}

// maxOf is Max of one series over the seqs [lo, hi). A sealed chunk that
// lies wholly inside and never drops has its maximum in its summary (its
// last finite value), so a counter's maximum over an hour decodes only the
// edge chunks.
func (v view) maxOf(rec *seriesRec, lo, hi uint64) (float64, bool) {
	m, ok := math.Inf(-1), false
	take := func(seg []float64, base, lo, hi uint64) {
		for seq := lo; seq < hi && seq-base < uint64(len(seg)); seq++ {
			if x := seg[seq-base]; finite(x) {
				m, ok = math.Max(m, x), true
			}
		}
	}
	p := &rec.pts
	for k := range p.sealed {
		ch := &p.sealed[k]
		slo, shi := ch.first, p.sealedEnd(k)
		if shi <= lo || slo >= hi {
			continue
		}
		if lo <= slo && shi <= hi && !ch.run.broken() {
			m, ok = math.Max(m, ch.run.lastVal), true
			continue
		}
		take(v.d.segmentValues(p, k), slo, max(lo, slo), min(hi, shi))
	}
	if slo, shi := p.bounds(-1); shi > lo && slo < hi {
		take(v.d.segmentValues(p, -1), slo, max(lo, slo), min(hi, shi))
	}
	if !ok {
		return 0, false
	}
	return m, true
}

func (v view) Min(sel detect.Selector, from, to time.Time) (float64, bool) {
	m, ok := math.Inf(1), false
	v.eachScrape(sel, from, to, func(s float64) { m = math.Min(m, s); ok = true })
	if !ok {
		return 0, false
	}
	return m, true
}

// CountAbove implements detect.ScrapeCounter.
func (v view) CountAbove(sel detect.Selector, threshold float64, from, to time.Time) (above, scrapes int) {
	v.eachScrape(sel, from, to, func(s float64) {
		scrapes++
		if s > threshold {
			above++
		}
	})
	return above, scrapes
}

// bucket is one cumulative histogram bucket: observations <= upper.
type bucket struct {
	upper float64
	count float64
}

func (v view) Quantile(q float64, family string, match []detect.Match, from, to time.Time) (float64, bool) {
	if q < 0 || q > 1 || math.IsNaN(q) {
		return 0, false
	}
	lo, hi := v.seqRange(from, to)
	if hi-lo < 2 {
		return 0, false
	}
	if a, ok := v.d.answers.quantile(q, family, match, lo, hi); ok {
		return a.val, a.ok
	}
	a := v.d.answers.question(family, match, q, lo, hi)
	a.val, a.ok = v.computeQuantile(q, family, match, lo, hi)
	v.d.answers.putQuantile(a)
	return a.val, a.ok
}

// computeQuantile is Quantile over the seqs [lo, hi), not asked before.
func (v view) computeQuantile(q float64, family string, match []detect.Match, lo, hi uint64) (float64, bool) {
	buckets := v.d.buckets[:0]
	var prev *points
	var inc float64
	var n int
	for _, rec := range v.selected(family+"_bucket", match) {
		if !rec.is(recHasLE) {
			continue
		}
		// The buckets above every observation hold what the +Inf bucket
		// holds, and those below every observation hold zero: a bucket
		// that reads what the one before it read has its increase.
		if prev == nil || !sameReads(prev, &rec.pts, lo) {
			inc, _, _, n = v.counterIncrease(rec, lo, hi)
		}
		prev = &rec.pts
		if n < 2 {
			continue
		}
		// Sum the series of equal bounds (e.g. is_streaming=true|false).
		merged := false
		for i := range buckets {
			if buckets[i].upper == rec.set.le {
				buckets[i].count += inc
				merged = true
				break
			}
		}
		if !merged {
			buckets = append(buckets, bucket{upper: rec.set.le, count: inc})
		}
	}
	v.d.buckets = buckets[:0] // kept for the next call, grown
	return bucketQuantile(q, buckets)
}

// bucketQuantile follows Prometheus' histogram_quantile: buckets sorted by
// upper bound, the last one must be +Inf; the quantile is interpolated
// linearly inside the bucket holding rank q×total, the first bucket's lower
// bound is 0 (unless its upper bound is <= 0), and a rank in the +Inf bucket
// yields the highest finite bound. ok=false without observations.
func bucketQuantile(q float64, buckets []bucket) (float64, bool) {
	if len(buckets) < 2 {
		return 0, false
	}
	slices.SortFunc(buckets, func(a, b bucket) int { return cmp.Compare(a.upper, b.upper) })
	if !math.IsInf(buckets[len(buckets)-1].upper, 1) {
		return 0, false
	}
	// Increases computed per bucket can be non-monotonic after partial data
	// (a bucket missing a scrape); counts are cumulative, so enforce it.
	for i := 1; i < len(buckets); i++ {
		if buckets[i].count < buckets[i-1].count {
			buckets[i].count = buckets[i-1].count
		}
	}
	total := buckets[len(buckets)-1].count
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	b := sort.Search(len(buckets)-1, func(i int) bool { return buckets[i].count >= rank })
	if b == len(buckets)-1 {
		return buckets[len(buckets)-2].upper, true
	}
	if b == 0 && buckets[0].upper <= 0 {
		return buckets[0].upper, true
	}
	lower, count := 0.0, buckets[b].count
	if b > 0 {
		lower = buckets[b-1].upper
		count -= buckets[b-1].count
		rank -= buckets[b-1].count
	}
	if count <= 0 {
		return lower, true
	}
	return lower + (buckets[b].upper-lower)*(rank/count), true
}

func (v view) Observations(family string, match []detect.Match, from, to time.Time) (float64, bool) {
	return v.Increase(detect.Selector{Name: family + "_count", Match: match}, from, to)
}

func (v view) Restarts(from, to time.Time) int {
	n := 0
	for _, t := range v.r.restarts {
		if t.After(from) && !t.After(to) {
			n++
		}
	}
	return n
}

func (v view) LastRestart() time.Time {
	if len(v.r.restarts) == 0 {
		return time.Time{}
	}
	return v.r.restarts[len(v.r.restarts)-1]
}
