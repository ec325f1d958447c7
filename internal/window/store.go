// Package window keeps a bounded sliding window of recent samples per
// replica and answers the detectors' range questions (rates, averages,
// histogram quantiles, restarts) through the detect.Window interface.
//
// Points are stored losslessly: every detector question needs exact
// values at scrape resolution (reset-aware increases, per-scrape sums,
// bucket increases over arbitrary ranges), which per-minute aggregates
// cannot give for ranges that do not fall on their boundaries. Each series'
// values are kept in chunks of 120 samples indexed by the replica's scrape
// sequence number, and real scrape times once per replica. A chunk whose
// values are all integers (counters of requests, tokens, histogram
// buckets) is varint deltas; any other is Prometheus TSDB's XOR encoding
// (tsdb/chunkenc) with the sequence number as the timestamp, so
// consecutive scrapes cost about one bit of timestamp. A scrape the series
// missed has no sample (it reads as NaN, as NaN values do); the newest
// value stays unencoded, so a duplicate in one scrape overwrites it and
// Last needs no decoding. Retention frees whole chunks, so a series holds
// at most one chunk past the window. Every series of the store with the
// same labels, of any replica, shares one label set (labelSets), and the
// series of a replica that seal equal chunks together hold one copy of
// their bytes (chunkShare). A View decodes each chunk it reads at most
// once, into a slab reused between Views.
//
// Memory is accounted and bounded: the store counts each replica's bytes
// (chunks, chunk lists, head chunks, series records, label sets, scrape
// times; a chunk several series share once) and exports the sum per
// target as
// watchdog_window_bytes. Points older than Retention are dropped; a
// replica holds at most MaxPointsPerSeries scrapes and MaxSeriesPerReplica
// series; and its window is kept within MaxBytesPerReplica: new series are
// admitted while it is below half of the budget, and at the budget even
// known series' samples are dropped. Dropped samples are reported by
// Append (ErrTooManySeries, ErrMemoryBudget) and counted in
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
	"hash/maphash"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
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
	s := &Store{
		opts:     opts,
		replicas: map[string]*replica{},
		byTarget: map[string]map[string]*replica{},
		ingested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_samples_ingested_total",
			Help: "Samples recorded into the sliding windows.",
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_series_rejected_total",
			Help: "Samples dropped because their replica reached the series limit (reason series_limit) or its window memory budget (reason memory_budget).",
		}, []string{"target", "reason"}),
		seriesHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_series",
			Help: "Series held in the sliding windows, per scrape target.",
		}, []string{"target"}),
		bytesHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_window_bytes",
			Help: "Memory held by the sliding windows in the store's own accounting (encoded points, a chunk its series share counted once, series records, the label sets its series made), per scrape target.",
		}, []string{"target"}),
		replicasGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "watchdog_replicas",
			Help: "Replicas held in the sliding windows.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.ingested, s.rejected, s.seriesHeld, s.bytesHeld, s.replicasGauge} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("window: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Options returns the effective options (defaults filled in).
func (s *Store) Options() Options { return s.opts }

// replica is one replica's window. Its fields are guarded by mu.
type replica struct {
	mu    sync.RWMutex
	info  detect.Replica
	state detect.ScrapeState
	// failingSince is the first failed scrape of the current run of
	// failures (for ScrapeState.LastOutage).
	failingSince time.Time

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

// Append records one scrape: the samples of a successful one, the failure of
// a failed one. It implements the scraper's Appender.
func (s *Store) Append(sc series.Scrape) error {
	if sc.Target == "" {
		return errors.New("window: scrape without a target")
	}
	if sc.Reason != "" {
		s.appendFailure(sc)
		return nil
	}
	groups := sc.Groups
	if len(groups) == 0 {
		// Up but exposing nothing: still a successful scrape of the target.
		groups = []series.Group{{}}
	}
	var errs []error
	var ingested int
	var rejected rejections
	for i := range groups {
		g := &groups[i]
		name := series.ReplicaName(sc.Target, g.Worker)
		r := s.replicaFor(name, sc.Target, sc.Kind)
		n, err := r.appendGroup(sc, g, &s.opts, &rejected)
		ingested += n
		if err != nil {
			errs = append(errs, fmt.Errorf("window: replica %q: %w", name, err))
		}
	}
	s.collectTarget(sc, groups)
	s.ingested.Add(float64(ingested))
	if rejected.seriesLimit > 0 {
		s.rejected.WithLabelValues(sc.Target, string(RejectSeriesLimit)).Add(float64(rejected.seriesLimit))
	}
	if rejected.memoryBudget > 0 {
		s.rejected.WithLabelValues(sc.Target, string(RejectMemoryBudget)).Add(float64(rejected.memoryBudget))
	}
	return errors.Join(errs...)
}

// rejections counts the samples one Append dropped, by reason.
type rejections struct{ seriesLimit, memoryBudget int }

// exposes reports whether the scrape's groups include the replica name.
func exposes(target string, groups []series.Group, name string) bool {
	for i := range groups {
		if series.ReplicaName(target, groups[i].Worker) == name {
			return true
		}
	}
	return false
}

// replicaFor returns the named replica, creating it.
func (s *Store) replicaFor(name, target, kind string) *replica {
	s.mu.RLock()
	r := s.replicas[name]
	s.mu.RUnlock()
	if r != nil {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r = s.replicas[name]; r != nil {
		return r
	}
	r = newReplica(name, target, kind, &s.sets)
	s.replicas[name] = r
	if s.byTarget[target] == nil {
		s.byTarget[target] = map[string]*replica{}
	}
	s.byTarget[target][name] = r
	s.replicasGauge.Set(float64(len(s.replicas)))
	return r
}

// appendFailure marks every replica of the target down, creating the
// target's own replica when none exists so that a never-reachable target is
// visible.
func (s *Store) appendFailure(sc series.Scrape) {
	s.mu.RLock()
	rs := make([]*replica, 0, len(s.byTarget[sc.Target]))
	for _, r := range s.byTarget[sc.Target] {
		rs = append(rs, r)
	}
	s.mu.RUnlock()
	if len(rs) == 0 {
		rs = append(rs, s.replicaFor(sc.Target, sc.Target, sc.Kind))
	}
	for _, r := range rs {
		r.mu.Lock()
		st := &r.state
		if st.FirstSeen.IsZero() {
			st.FirstSeen = sc.At
		}
		if sc.At.After(st.LastAttempt) {
			if st.ConsecutiveFailures == 0 {
				r.failingSince = sc.At
			}
			st.LastAttempt = sc.At
			st.Up = false
			st.Reason = sc.Reason
			st.Status = sc.Status
			st.Error = sc.Error
			st.ConsecutiveFailures++
			st.ConsecutiveSuccesses = 0
		}
		if r.info.Kind == "" {
			r.info.Kind = sc.Kind
		}
		r.setPod(sc, s.opts.Retention)
		r.mu.Unlock()
	}
}

// collectTarget forgets, after a successful scrape of the target, the
// replicas it no longer exposes that are either placeholders that never
// answered or silent for longer than the retention; then refreshes the
// target's series gauge. Replica locks are taken without holding the store
// lock, so a long-running View never stalls the whole store.
func (s *Store) collectTarget(sc series.Scrape, groups []series.Group) {
	s.mu.RLock()
	rs := make([]*replica, 0, len(s.byTarget[sc.Target]))
	for _, r := range s.byTarget[sc.Target] {
		rs = append(rs, r)
	}
	s.mu.RUnlock()
	total, bytes := 0, 0
	var gone []*replica
	for _, r := range rs {
		r.mu.RLock()
		placeholder := r.state.LastSuccess.IsZero()
		silent := sc.At.Sub(r.state.LastAttempt) > s.opts.Retention
		n, b, name := r.nSeries, r.bytes, r.info.Name
		r.mu.RUnlock()
		if (placeholder || silent) && !exposes(sc.Target, groups, name) {
			gone = append(gone, r)
			continue
		}
		total += n
		bytes += b
	}
	s.seriesHeld.WithLabelValues(sc.Target).Set(float64(total))
	s.bytesHeld.WithLabelValues(sc.Target).Set(float64(bytes))
	if len(gone) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range gone {
		if s.replicas[r.info.Name] == r {
			delete(s.replicas, r.info.Name)
			delete(s.byTarget[sc.Target], r.info.Name)
		}
	}
	s.replicasGauge.Set(float64(len(s.replicas)))
}

// setPod records the pod status a scrape carries, and when the pod's
// restart count went up since the last one (a container restart seen by
// Kubernetes, whether or not a scrape ever reached that process). r.mu
// must be held.
func (r *replica) setPod(sc series.Scrape, retention time.Duration) {
	if sc.Pod == nil {
		return
	}
	st := &r.state
	if old := r.info.Pod; old != nil && old.Name == sc.Pod.Name && sc.Pod.Restarts > old.Restarts {
		at := sc.At
		if t := sc.Pod.LastTermination.Finished; !t.IsZero() && t.Before(at) {
			at = t
		}
		for range min(sc.Pod.Restarts-old.Restarts, 16) {
			st.PodRestarts = append(st.PodRestarts, at)
		}
	}
	cut := sc.At.Add(-retention)
	i := 0
	for i < len(st.PodRestarts) && st.PodRestarts[i].Before(cut) {
		i++
	}
	if i > 0 {
		st.PodRestarts = slices.Clone(st.PodRestarts[i:])
	}
	r.info.Pod = sc.Pod
}

// appendGroup records one replica's samples at sc.At. It returns how many
// samples were recorded and adds the ones it dropped to rej.
func (r *replica) appendGroup(sc series.Scrape, g *series.Group, opts *Options, rej *rejections) (ingested int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := sc.At.UnixNano()
	if r.times.n > 0 {
		if newest, _ := r.times.at(r.times.end() - 1); at <= newest {
			return 0, fmt.Errorf("%w: %s is not after %s", ErrOutOfOrder,
				sc.At.UTC().Format(time.RFC3339Nano), time.Unix(0, newest).UTC().Format(time.RFC3339Nano))
		}
	}

	st := &r.state
	if st.FirstSeen.IsZero() {
		st.FirstSeen = sc.At
	}
	if st.ConsecutiveFailures > 0 {
		st.LastOutage = detect.Outage{From: r.failingSince, To: sc.At, Failures: st.ConsecutiveFailures, Reason: st.Reason, Status: st.Status}
	}
	st.LastAttempt, st.LastSuccess = sc.At, sc.At
	st.Up, st.Reason, st.Status, st.Error, st.ConsecutiveFailures = true, "", 0, "", 0
	st.ConsecutiveSuccesses++
	r.setPod(sc, opts.Retention)
	switch {
	case g.Worker != "":
		// A worker behind a gateway's /engine_metrics is an engine, whatever
		// the target's kind.
		r.info.Kind = "engine"
	case sc.Kind != "":
		r.info.Kind = sc.Kind
	}
	if g.Model != "" {
		r.info.Model = g.Model
	} else if m := sc.Labels["model"]; m != "" && r.info.Model == "" {
		r.info.Model = m // discovery knows the model when the exposition does not say
	}
	if sc.Labels != nil {
		r.info.Labels = sc.Labels
	}
	if g.EngineType != "" {
		r.info.EngineType = g.EngineType
	}

	seq := r.times.end()
	r.bytes -= 8 * len(r.times.buf)
	r.times.push(at, opts.MaxPointsPerSeries)
	r.bytes += 8 * len(r.times.buf)
	r.dropOlderThan(at - int64(opts.Retention))
	oldest := r.times.first
	thinBefore, slot := r.thinBoundary(at, opts)

	// Restart detection, folded into the ingest loop: a restart resets most
	// counters at once, or changes the process start time.
	var counters, dropped int
	var overLimit, overBudget int
	startChanged := false
	r.sizeOrder(len(g.Samples))
	defer r.trimOrder(len(g.Samples))
	// Chunks share bytes only between series that thin alike (see
	// chunkShare), and not while a _sum or _count is yet to learn whether
	// it thins.
	shares := [2]chunkShare{{seed: r.seed, held: &r.shared}, {seed: r.seed, held: &r.shared}}
	for i := range g.Samples {
		smp := &g.Samples[i]
		var h uint64
		rec := r.atPosition(i, smp)
		if rec == nil {
			h = hashSeries(r.seed, smp.Name, smp.Labels)
			rec = r.lookup(h, smp.Name, smp.Labels)
		}
		r.remember(i, rec) // nil while a new series is not admitted
		switch {
		case rec != nil:
			r.bytes += rec.pts.dropBefore(oldest, &r.shared)
			if rec.is(recHistogramPart) && thinBefore > 0 {
				rec.mark(recThins, r.exposesBuckets(rec.name))
				rec.mark(recHistogramPart, false)
			}
			if rec.is(recThins) && thinBefore > 0 {
				var d int
				d, r.thinBuf = rec.pts.thinBefore(thinBefore, slot, r.thinBuf, &shares[1])
				r.bytes += d
			}
			// Known series keep recording up to the budget, new ones are
			// admitted up to half of it: the rest is headroom for the
			// chunks of the series held, so that a target flooding new
			// series does not starve them.
			if r.bytes >= opts.MaxBytesPerReplica && !(rec.pts.hasNewest && rec.pts.newest == seq) {
				overBudget++
				continue
			}
		case r.nSeries >= opts.MaxSeriesPerReplica:
			overLimit++
			continue
		case r.bytes+newSeriesBytes(smp) > opts.MaxBytesPerReplica/2:
			overBudget++
			continue
		default:
			rec = r.create(h, smp)
			r.order[i] = rec
		}
		v := smp.Value
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			if rec.is(recHasLast) {
				if rec.is(recCounterLike) && rec.last > 0 {
					counters++
					if v < rec.last {
						dropped++
					}
				}
				if rec.is(recStartTime) && v != rec.last {
					startChanged = true
				}
			}
			rec.last = v
			rec.mark(recHasLast, true)
		}
		sh := &shares[0]
		switch {
		case rec.is(recHistogramPart):
			sh = nil
		case rec.is(recThins):
			sh = &shares[1]
		}
		r.bytes += rec.pts.put(seq, v, sh)
		ingested++
	}
	if startChanged || (dropped > 0 && 2*dropped >= counters) {
		r.restarts = append(r.restarts, sc.At)
	}

	r.appends++
	if r.appends%64 == 0 {
		r.sweep()
	}
	var errs []error
	if overLimit > 0 {
		errs = append(errs, fmt.Errorf("%w: %d samples of new series dropped, the replica already holds the limit of %d series",
			ErrTooManySeries, overLimit, opts.MaxSeriesPerReplica))
	}
	if overBudget > 0 {
		errs = append(errs, fmt.Errorf("%w: %d samples dropped, the replica's window holds %d bytes of its budget of %d",
			ErrMemoryBudget, overBudget, r.bytes, opts.MaxBytesPerReplica))
	}
	rej.seriesLimit += overLimit
	rej.memoryBudget += overBudget
	return ingested, errors.Join(errs...)
}

// atPosition is the series of the last scrape's i-th sample when smp is
// still that series, else nil.
func (r *replica) atPosition(i int, smp *series.Sample) *seriesRec {
	if i >= len(r.order) {
		return nil
	}
	if rec := r.order[i]; rec != nil && rec.name == smp.Name && labelsEqual(rec.labels(), smp.Labels) {
		return rec
	}
	return nil
}

// sizeOrder makes room in order for a scrape of n samples, exactly: a
// replica's order is as long as its scrapes, and append's doubling would
// add half of that again.
func (r *replica) sizeOrder(n int) {
	if before := cap(r.order); before < n {
		r.order = slices.Grow(r.order, n-len(r.order))
		r.bytes += 8 * (cap(r.order) - before)
	}
}

// remember records rec as the series of this scrape's i-th sample: every
// sample is remembered, in order.
func (r *replica) remember(i int, rec *seriesRec) {
	if i < len(r.order) {
		r.order[i] = rec
		return
	}
	before := cap(r.order)
	r.order = append(r.order, rec)
	r.bytes += 8 * (cap(r.order) - before)
}

// trimOrder ends order at the n samples of this scrape. A new series the
// budget or the limit refused is remembered as none.
func (r *replica) trimOrder(n int) {
	if n < len(r.order) {
		clear(r.order[n:])
		r.order = r.order[:n]
	}
}

// exposesBuckets reports whether the replica holds _bucket series of the
// histogram whose _sum or _count is name.
func (r *replica) exposesBuckets(name string) bool {
	base, _ := strings.CutSuffix(name, "_sum")
	base, _ = strings.CutSuffix(base, "_count")
	return len(r.families[base+"_bucket"]) > 0
}

// thinBoundary is the seq before which histogram chunks are thinned after a
// scrape at (unix nanos), the first scrape within HistogramFullResolution of
// it, and the slot they are thinned to; 0 when nothing is thinned.
func (r *replica) thinBoundary(at int64, opts *Options) (seq, slot uint64) {
	slot = opts.thinSlot()
	if opts.HistogramFullResolution < 0 || slot < 2 {
		return 0, slot
	}
	cut := at - int64(opts.HistogramFullResolution)
	ts := &r.times
	i := sort.Search(ts.n, func(i int) bool { x, _ := ts.at(ts.first + uint64(i)); return x >= cut })
	return ts.first + uint64(i), slot
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
