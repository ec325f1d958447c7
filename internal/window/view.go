package window

import (
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

func (v view) LabelValues(family, label string) []string {
	seq, ok := v.latest()
	if !ok {
		return nil
	}
	var out []string
	for _, rec := range v.r.families[family] {
		if rec.pts.end() != seq+1 {
			continue
		}
		if l := rec.labels().Get(label); l != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
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
	for s := range p.within(lo, hi) {
		if s.k >= 0 && s.lo >= lo && finite(firstValue(&p.sealed[s.k])) {
			return true
		}
		if anyFinite(v.d.segmentValues(p, s.k), s.lo, max(lo, s.lo), min(hi, s.hi)) {
			return true
		}
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
	for s := range p.within(lo, hi) {
		if s.k >= 0 && lo <= s.lo && s.hi <= hi && !p.sealed[s.k].run.broken() {
			m, ok = math.Max(m, p.sealed[s.k].run.lastVal), true
			continue
		}
		take(v.d.segmentValues(p, s.k), s.lo, max(lo, s.lo), min(hi, s.hi))
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
	return v.CountWhere(sel, func(s float64) bool { return s > threshold }, from, to)
}

// CountWhere implements detect.ScrapeCounter.
func (v view) CountWhere(sel detect.Selector, match func(float64) bool, from, to time.Time) (matching, scrapes int) {
	v.eachScrape(sel, from, to, func(s float64) {
		scrapes++
		if match(s) {
			matching++
		}
	})
	return matching, scrapes
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
