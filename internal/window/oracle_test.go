package window

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// oracle is the reference detect.Window the compact store is checked
// against: every point of every successful scrape in plain slices, read
// with straightforward loops. It shares no storage code with the store;
// it borrows the pure helpers (label matching, histogram_quantile's
// interpolation) and the store's Replica and Scrape, which the point
// encoding does not touch.
type oracle struct {
	retention time.Duration
	limit     int // scrapes held at most (Options.MaxPointsPerSeries)

	times    []time.Time // successful scrapes, oldest first
	series   []*oracleSeries
	byKey    map[string]*oracleSeries
	byName   map[string][]*oracleSeries
	restarts []time.Time
}

type oracleSeries struct {
	name   string
	labels series.Labels
	vals   []float64 // by index into oracle.times
	has    []bool    // whether the scrape held the series
	last   float64   // newest finite value
	seen   bool      // last is set
}

func newOracle(opts Options) *oracle {
	return &oracle{retention: opts.Retention, limit: opts.MaxPointsPerSeries, byKey: map[string]*oracleSeries{}, byName: map[string][]*oracleSeries{}}
}

// append mirrors a successful scrape; it reports false for one the store
// must refuse as out of order.
func (o *oracle) append(at time.Time, samples []series.Sample) bool {
	if n := len(o.times); n > 0 && !at.After(o.times[n-1]) {
		return false
	}
	o.times = append(o.times, at)
	idx := len(o.times) - 1
	counters, dropped, startChanged := 0, 0, false
	for _, s := range samples {
		key := s.Key()
		os := o.byKey[key]
		if os == nil {
			os = &oracleSeries{name: s.Name, labels: append(series.Labels(nil), s.Labels...)}
			o.byKey[key] = os
			o.series = append(o.series, os)
			o.byName[s.Name] = append(o.byName[s.Name], os)
		}
		if finite(s.Value) {
			if os.seen {
				gaugeHistogram := os.labels.Get("gt") != ""
				counterLike := !gaugeHistogram && (strings.HasSuffix(s.Name, "_total") || strings.HasSuffix(s.Name, "_count") ||
					strings.HasSuffix(s.Name, "_sum") || strings.HasSuffix(s.Name, "_bucket"))
				if counterLike && os.last > 0 {
					counters++
					if s.Value < os.last {
						dropped++
					}
				}
				if strings.HasSuffix(s.Name, "process_start_time_seconds") && s.Value != os.last {
					startChanged = true
				}
			}
			os.last, os.seen = s.Value, true
		}
		os.set(idx, s.Value)
	}
	if startChanged || (dropped > 0 && 2*dropped >= counters) {
		o.restarts = append(o.restarts, at)
	}
	return true
}

func (s *oracleSeries) set(idx int, v float64) {
	for len(s.vals) <= idx {
		s.vals, s.has = append(s.vals, 0), append(s.has, false)
	}
	s.vals[idx], s.has[idx] = v, true
}

// at is the series' value at the scrape idx, ok=false when it was absent.
func (s *oracleSeries) at(idx int) (float64, bool) {
	if idx >= len(s.vals) || !s.has[idx] {
		return 0, false
	}
	return s.vals[idx], true
}

// thinLike drops the histogram points the store thinned: for each chunk the
// store marked thinned, the oracle's own points of that chunk's scrapes
// that the thinning rule does not keep (Options.HistogramFullResolution). The
// rule is stated here again over the oracle's plain slices; only which
// scrapes a chunk spans comes from the store.
func (o *oracle) thinLike(s *Store, replica string) {
	r := s.replicas[replica]
	r.mu.RLock()
	defer r.mu.RUnlock()
	slot := int(s.opts.thinSlot())
	for _, recs := range r.families {
		for _, rec := range recs {
			os := o.byKey[series.Sample{Name: rec.name, Labels: rec.labels()}.Key()]
			for k := range rec.pts.sealed {
				if rec.pts.sealed[k].run.thinned() {
					os.thin(int(rec.pts.sealed[k].first), int(rec.pts.sealedEnd(k)), slot)
				}
			}
		}
	}
}

// thin keeps, of the points in the scrapes [first, end): the first; the
// first and last finite one; the first finite one of each slot of scrapes;
// and the finite ones on both sides of a drop between consecutive finite
// points. It forgets the rest.
func (s *oracleSeries) thin(first, end, slot int) {
	var fin []int
	for i := first; i < end; i++ {
		if v, ok := s.at(i); ok && finite(v) {
			fin = append(fin, i)
		}
	}
	keep := map[int]bool{first: true}
	for n, i := range fin {
		v := s.vals[i]
		switch {
		case n == 0 || n == len(fin)-1:
		case i/slot != fin[n-1]/slot:
		case v < s.vals[fin[n-1]]:
		case s.vals[fin[n+1]] < v:
		default:
			continue
		}
		keep[i] = true
	}
	for i := first; i < end && i < len(s.has); i++ {
		if !keep[i] {
			s.has[i] = false
		}
	}
}

// first is the index of the oldest scrape still inside the retention.
func (o *oracle) first() int {
	n := len(o.times)
	if n == 0 {
		return 0
	}
	cut := o.times[n-1].Add(-o.retention)
	i := max(0, n-o.limit)
	for i < n && o.times[i].Before(cut) {
		i++
	}
	return i
}

// in lists the held scrape indexes with from < t <= to.
func (o *oracle) in(from, to time.Time) []int {
	var out []int
	for i := o.first(); i < len(o.times); i++ {
		if o.times[i].After(from) && !o.times[i].After(to) {
			out = append(out, i)
		}
	}
	return out
}

func (o *oracle) family(name string, ms []detect.Match) []*oracleSeries {
	var out []*oracleSeries
	for _, s := range o.byName[name] {
		if matchesAll(s.labels, ms) {
			out = append(out, s)
		}
	}
	return out
}

func (o *oracle) restartedAt(t time.Time) bool {
	for _, r := range o.restarts {
		if r.Equal(t) {
			return true
		}
	}
	return false
}

// oracleView answers detect.Window from the oracle; Replica and Scrape come
// from the store's view.
type oracleView struct {
	o    *oracle
	real detect.Window
}

func (v oracleView) Replica() detect.Replica    { return v.real.Replica() }
func (v oracleView) Scrape() detect.ScrapeState { return v.real.Scrape() }

func (v oracleView) Last(sel detect.Selector) (float64, bool) {
	o := v.o
	if len(o.times) == 0 {
		return 0, false
	}
	newest := len(o.times) - 1
	sum, any := 0.0, false
	for _, s := range o.family(sel.Name, sel.Match) {
		if x, ok := s.at(newest); ok && finite(x) {
			sum = combine(sel.Combine, sum, x, any)
			any = true
		}
	}
	return sum, any
}

func (v oracleView) Has(name string) bool {
	o := v.o
	for _, s := range o.family(name, nil) {
		if _, ok := s.at(len(o.times) - 1); ok {
			return true
		}
	}
	return false
}

func (v oracleView) LabelValues(family, label string) []string {
	o := v.o
	var out []string
	for _, s := range o.family(family, nil) {
		if _, ok := s.at(len(o.times) - 1); !ok {
			continue
		}
		if l := s.labels.Get(label); l != "" && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

type point struct {
	at time.Time
	v  float64
}

// increase: the sum of rises; a drop at a restart counts the new value, a
// drop without one counts the series' steady growth rate over the drop's
// step, at most the new value.
func (v oracleView) increase(name string, ms []detect.Match, from, to time.Time) (float64, time.Duration, bool) {
	o := v.o
	idx := o.in(from, to)
	if len(idx) < 2 {
		return 0, 0, false
	}
	total, ok := 0.0, false
	var minT, maxT time.Time
	for _, s := range o.family(name, ms) {
		inc, pts := v.seriesIncrease(s, idx)
		if len(pts) < 2 {
			continue
		}
		if !ok || pts[0].at.Before(minT) {
			minT = pts[0].at
		}
		if !ok || pts[len(pts)-1].at.After(maxT) {
			maxT = pts[len(pts)-1].at
		}
		total += inc
		ok = true
	}
	return total, maxT.Sub(minT), ok
}

// seriesIncrease is one series' increase over the scrapes idx, and the
// finite points it rests on.
func (v oracleView) seriesIncrease(s *oracleSeries, idx []int) (float64, []point) {
	o := v.o
	{
		var pts []point
		for _, i := range idx {
			if x, has := s.at(i); has && finite(x) {
				pts = append(pts, point{o.times[i], x})
			}
		}
		if len(pts) < 2 {
			return 0, pts
		}
		// Between resets: the last value minus the first of each run
		// without a drop (the sum of its steps).
		inc, start := 0.0, pts[0].v
		var drops []int
		for k := 1; k < len(pts); k++ {
			switch {
			case pts[k].v >= pts[k-1].v:
			case o.restartedAt(pts[k].at):
				inc += pts[k-1].v - start
				inc += pts[k].v
				start = pts[k].v
			default:
				inc += pts[k-1].v - start
				start = pts[k].v
				drops = append(drops, k)
			}
		}
		inc += pts[len(pts)-1].v - start
		if len(drops) > 0 {
			steady := pts[len(pts)-1].at.Sub(pts[0].at).Nanoseconds()
			steadyInc := 0.0
			for k := 1; k < len(pts); k++ {
				if pts[k].v >= pts[k-1].v {
					steadyInc += pts[k].v - pts[k-1].v
				} else {
					steady -= pts[k].at.Sub(pts[k-1].at).Nanoseconds()
				}
			}
			perNano := 0.0
			if steady > 0 {
				perNano = steadyInc / float64(steady)
			}
			for _, k := range drops {
				inc += math.Min(pts[k].v, perNano*float64(pts[k].at.Sub(pts[k-1].at).Nanoseconds()))
			}
		}
		return inc, pts
	}
}

func (v oracleView) Increase(sel detect.Selector, from, to time.Time) (float64, bool) {
	inc, _, ok := v.increase(sel.Name, sel.Match, from, to)
	return inc, ok
}

func (v oracleView) Rate(sel detect.Selector, from, to time.Time) (float64, bool) {
	inc, span, ok := v.increase(sel.Name, sel.Match, from, to)
	if !ok || span <= 0 {
		return 0, false
	}
	return inc / span.Seconds(), true
}

// perScrape is the selected series combined at each scrape of the range
// that has a finite value.
func (v oracleView) perScrape(sel detect.Selector, from, to time.Time) []float64 {
	var out []float64
	fam := v.o.family(sel.Name, sel.Match)
	for _, i := range v.o.in(from, to) {
		acc, any := 0.0, false
		for _, s := range fam {
			if x, ok := s.at(i); ok && finite(x) {
				acc = combine(sel.Combine, acc, x, any)
				any = true
			}
		}
		if any {
			out = append(out, acc)
		}
	}
	return out
}

func (v oracleView) Avg(sel detect.Selector, from, to time.Time) (float64, bool) {
	xs := v.perScrape(sel, from, to)
	if len(xs) == 0 {
		return 0, false
	}
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs)), true
}

func (v oracleView) Max(sel detect.Selector, from, to time.Time) (float64, bool) {
	xs := v.perScrape(sel, from, to)
	if len(xs) == 0 {
		return 0, false
	}
	m := math.Inf(-1)
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m, true
}

func (v oracleView) Min(sel detect.Selector, from, to time.Time) (float64, bool) {
	xs := v.perScrape(sel, from, to)
	if len(xs) == 0 {
		return 0, false
	}
	m := math.Inf(1)
	for _, x := range xs {
		m = math.Min(m, x)
	}
	return m, true
}

// Present is what Max's ok says.
func (v oracleView) Present(sel detect.Selector, from, to time.Time) bool {
	_, ok := v.Max(sel, from, to)
	return ok
}

func (v oracleView) CountAbove(sel detect.Selector, threshold float64, from, to time.Time) (above, scrapes int) {
	return v.CountWhere(sel, func(x float64) bool { return x > threshold }, from, to)
}

func (v oracleView) CountWhere(sel detect.Selector, match func(float64) bool, from, to time.Time) (matching, scrapes int) {
	for _, x := range v.perScrape(sel, from, to) {
		scrapes++
		if match(x) {
			matching++
		}
	}
	return matching, scrapes
}

func (v oracleView) Quantile(q float64, family string, match []detect.Match, from, to time.Time) (float64, bool) {
	idx := v.o.in(from, to)
	if q < 0 || q > 1 || math.IsNaN(q) || len(idx) < 2 {
		return 0, false
	}
	var buckets []bucket
	for _, s := range v.o.family(family+"_bucket", match) {
		le, ok := parseLE(s.labels.Get("le"))
		if !ok {
			continue
		}
		inc, pts := v.seriesIncrease(s, idx)
		if len(pts) < 2 {
			continue
		}
		merged := false
		for i := range buckets {
			if buckets[i].upper == le {
				buckets[i].count += inc
				merged = true
			}
		}
		if !merged {
			buckets = append(buckets, bucket{upper: le, count: inc})
		}
	}
	return bucketQuantile(q, buckets)
}

func (v oracleView) Observations(family string, match []detect.Match, from, to time.Time) (float64, bool) {
	return v.Increase(detect.Selector{Name: family + "_count", Match: match}, from, to)
}

func (v oracleView) Restarts(from, to time.Time) int {
	n := 0
	cut := v.o.times[len(v.o.times)-1].Add(-v.o.retention)
	for _, t := range v.o.restarts {
		if !t.Before(cut) && t.After(from) && !t.After(to) {
			n++
		}
	}
	return n
}

func (v oracleView) LastRestart() time.Time {
	if n := len(v.o.restarts); n > 0 && v.Restarts(time.Time{}, v.o.restarts[n-1]) > 0 {
		return v.o.restarts[n-1]
	}
	return time.Time{}
}
