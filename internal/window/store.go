// Package window keeps a bounded sliding window of recent samples per
// replica and answers the detectors' range questions (rates, averages,
// histogram quantiles, restarts) through the detect.Window interface.
//
// Points are stored losslessly, but for histogram counters older than
// Options.HistogramFullResolution (thinned to about one a minute):
// every detector question needs exact values at scrape resolution
// (reset-aware increases, per-scrape sums, bucket increases over
// arbitrary ranges), which per-minute aggregates cannot give for ranges
// that do not fall on their boundaries. Each series' values are kept in
// chunks of 120 samples indexed by the replica's scrape sequence
// number, and real scrape times once per replica. A chunk whose values
// are all integers (counters of requests, tokens, histogram buckets) or
// all decimals of at most six places (gauges rounded to a few) is
// varint deltas of the integers, or of the decimals times a power of
// ten; any other is Prometheus TSDB's XOR encoding (tsdb/chunkenc) with
// the sequence number as the timestamp, so consecutive scrapes cost
// about one bit of timestamp. A scrape the series missed has no sample
// (it reads as NaN, as NaN values do); the newest value stays
// unencoded, so a duplicate in one scrape overwrites it and Last needs
// no decoding. Retention frees whole chunks, so a series holds at most
// one chunk past the window. Every series of the store with the same
// labels, of any replica, shares one label set (labelSets), and the
// series of a replica that seal equal chunks together hold one copy of
// their bytes (chunkShare). A View decodes each chunk it reads at most
// once, into a slab reused between Views.
//
// Memory is accounted and bounded: the store counts each replica's
// bytes (chunks, chunk lists, head chunks, series records, label sets,
// scrape times; a chunk several series share once) and exports the sum
// per target as watchdog_window_bytes. Points older than Retention are
// dropped; a replica holds at most MaxPointsPerSeries scrapes and
// MaxSeriesPerReplica series; and its window is kept within
// MaxBytesPerReplica: new series are admitted while it is below half of
// the budget, and at the budget even known series' samples are dropped.
// Dropped samples are reported by Append (ErrTooManySeries,
// ErrMemoryBudget) and counted in
// watchdog_series_rejected_total{target,reason}.
//
// Measured (TestWindowMemoryAtProductionRetention: the full current SGLang
// exposition with values moving as the simulator's busy replica's, 65
// minutes at 5 s, histograms thinned past 15 minutes): about 1 KiB per
// series, against 8 bytes per point before. Integer chunks cost about 1.1
// bytes per point, XOR ones about 4.8; a series' record and map slots 208
// bytes more.
package window

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Defaults of Options.
const (
	DefaultScrapeInterval          = 5 * time.Second
	DefaultMaxSeriesPerReplica     = 20000
	DefaultMaxBytesPerReplica      = 4 << 20
	DefaultHistogramFullResolution = 15 * time.Minute
)

// Errors wrapped by Append.
var (
	// ErrTooManySeries: the replica already holds MaxSeriesPerReplica series;
	// samples of new series were dropped, known series were recorded.
	ErrTooManySeries = errors.New("too many series")
	// ErrMemoryBudget: the replica's window is at MaxBytesPerReplica (for
	// new series: at half of it); the samples the error counts were
	// dropped.
	ErrMemoryBudget = errors.New("window memory budget reached")
	// ErrOutOfOrder: the scrape is not newer than the replica's newest one;
	// it was ignored.
	ErrOutOfOrder = errors.New("scrape out of order")
)

// Options bound the store.
type Options struct {
	// Retention is how long points are kept. It must cover the longest
	// baseline plus range any detector reads (detect.Config.MaxLookback).
	Retention time.Duration
	// ScrapeInterval is the shortest scrape interval of any target; it only
	// sizes the per-series point cap. Default 5s.
	ScrapeInterval time.Duration
	// MaxSeriesPerReplica caps the series one replica may hold. Default 20000.
	MaxSeriesPerReplica int
	// MaxPointsPerSeries caps the scrapes one replica's window holds.
	// Default: Retention/ScrapeInterval plus 20% for scrape jitter.
	MaxPointsPerSeries int
	// MaxBytesPerReplica is the memory budget of one replica's window, in
	// the store's own accounting (encoded points, a chunk its series share
	// counted once, per-series records, the label sets its series made).
	// New series are admitted while the window is below half of
	// it, the other half being headroom for the points of the series held;
	// at the budget, samples of known series are dropped too
	// (ErrMemoryBudget either way). Default 4 MiB: about 10 times what the
	// full current SGLang exposition (477 series, ≈393 KiB) costs at the
	// default retention of 65 minutes at 5 s.
	MaxBytesPerReplica int
	// HistogramFullResolution is how long the counters of a histogram
	// (its _bucket series with an "le", and its _sum and _count once the
	// replica is seen to expose its buckets) keep every scrape. Older
	// points are thinned to the first of every minute's worth of scrapes
	// at ScrapeInterval, plus both sides of every drop (points.thin): a
	// histogram is only read for quantiles, means and observation counts
	// over a range, which over an hour-long baseline then starts up to a
	// minute after the baseline's start instead of at its first scrape
	// (a _sum, its _count and its buckets at the same scrape, so a mean
	// is still that of one span), while old histogram points keep about a
	// tenth of their points. Default 15m, longer than the current range of
	// every detector (10m at most by default); negative: never thin. With
	// a scrape interval of 30 s or more there is nothing to thin.
	HistogramFullResolution time.Duration
}

// thinSlot is how many scrapes at the options' interval make a minute:
// the resolution histograms are thinned to. 1 (nothing to thin) from 30 s on.
func (o Options) thinSlot() uint64 {
	return uint64(max(1, (time.Minute+o.ScrapeInterval/2)/o.ScrapeInterval))
}

func (o Options) withDefaults() (Options, error) {
	if o.Retention <= 0 {
		return o, fmt.Errorf("window: retention must be positive, got %s", o.Retention)
	}
	if o.ScrapeInterval < 0 || o.MaxSeriesPerReplica < 0 || o.MaxPointsPerSeries < 0 || o.MaxBytesPerReplica < 0 {
		return o, errors.New("window: scrape interval and limits must not be negative")
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = DefaultScrapeInterval
	}
	if o.MaxSeriesPerReplica == 0 {
		o.MaxSeriesPerReplica = DefaultMaxSeriesPerReplica
	}
	if o.MaxBytesPerReplica == 0 {
		o.MaxBytesPerReplica = DefaultMaxBytesPerReplica
	}
	if o.HistogramFullResolution == 0 {
		o.HistogramFullResolution = DefaultHistogramFullResolution
	}
	if o.MaxPointsPerSeries == 0 {
		n := int(math.Ceil(float64(o.Retention) / float64(o.ScrapeInterval)))
		o.MaxPointsPerSeries = n + n/5 + 2
	}
	if o.MaxPointsPerSeries < 2 {
		return o, errors.New("window: max points per series must be at least 2")
	}
	return o, nil
}

// Store holds the windows of every replica. It is safe for concurrent use:
// appends of different targets proceed in parallel, and views read under a
// per-replica read lock.
type Store struct {
	opts Options

	mu       sync.RWMutex
	replicas map[string]*replica            // by replica name
	byTarget map[string]map[string]*replica // target -> replica name -> replica

	decoders sync.Pool // of *decoder, one per View
	sets     labelSets // shared by the replicas' series

	ingested      prometheus.Counter
	rejected      *prometheus.CounterVec
	seriesHeld    *prometheus.GaugeVec
	bytesHeld     *prometheus.GaugeVec
	replicasGauge prometheus.Gauge
}

// RejectReason says why samples were dropped (the reason label of
// watchdog_series_rejected_total).
type RejectReason string

// Reject reasons.
const (
	RejectSeriesLimit  RejectReason = "series_limit"  // MaxSeriesPerReplica reached
	RejectMemoryBudget RejectReason = "memory_budget" // MaxBytesPerReplica reached
)

// New returns an empty store and registers its metrics on reg (nil: not
// registered).
func New(opts Options, reg prometheus.Registerer) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	f := promauto.With(reg)
	s := &Store{
		opts:     opts,
		replicas: map[string]*replica{},
		byTarget: map[string]map[string]*replica{},
		ingested: f.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_samples_ingested_total",
			Help: "Samples recorded into the sliding windows.",
		}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_series_rejected_total",
			Help: "Samples dropped because their replica reached the series limit (reason series_limit) or its window memory budget (reason memory_budget).",
		}, []string{"target", "reason"}),
		seriesHeld: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_series",
			Help: "Series held in the sliding windows, per scrape target.",
		}, []string{"target"}),
		bytesHeld: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_window_bytes",
			Help: "Memory held by the sliding windows in the store's own accounting (encoded points, a chunk its series share counted once, series records, the label sets its series made), per scrape target.",
		}, []string{"target"}),
		replicasGauge: f.NewGauge(prometheus.GaugeOpts{
			Name: "watchdog_replicas",
			Help: "Replicas held in the sliding windows.",
		}),
	}
	return s, nil
}

// Options returns the effective options (defaults filled in).
func (s *Store) Options() Options { return s.opts }

// Remove frees every replica of the target.
func (s *Store) Remove(target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.byTarget[target] {
		delete(s.replicas, name)
	}
	delete(s.byTarget, target)
	s.seriesHeld.DeleteLabelValues(target)
	s.bytesHeld.DeleteLabelValues(target)
	s.rejected.DeletePartialMatch(prometheus.Labels{"target": target})
	s.replicasGauge.Set(float64(len(s.replicas)))
}

// Replicas lists the replicas held, sorted by name.
func (s *Store) Replicas() []detect.Replica {
	s.mu.RLock()
	rs := make([]*replica, 0, len(s.replicas))
	for _, r := range s.replicas {
		rs = append(rs, r)
	}
	s.mu.RUnlock()
	out := make([]detect.Replica, 0, len(rs))
	for _, r := range rs {
		r.mu.RLock()
		out = append(out, r.info)
		r.mu.RUnlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// View runs fn with a read-only window of the replica, under the replica's
// read lock (appends to it wait; other replicas are unaffected). The window
// must not be used after fn returns. View reports whether the replica exists.
func (s *Store) View(name string, fn func(w detect.Window)) bool {
	s.mu.RLock()
	r := s.replicas[name]
	s.mu.RUnlock()
	if r == nil {
		return false
	}
	d, _ := s.decoders.Get().(*decoder)
	if d == nil {
		d = new(decoder)
	}
	defer s.decoders.Put(d)
	r.mu.RLock()
	defer r.mu.RUnlock()
	defer d.end()
	fn(view{r: r, d: d})
	return true
}
