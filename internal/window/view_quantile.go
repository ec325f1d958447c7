package window

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

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
