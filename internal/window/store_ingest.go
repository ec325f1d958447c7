package window

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

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

// targetReplicas lists the target's replicas under the store lock, so
// that the caller takes their locks without holding it.
func (s *Store) targetReplicas(target string) []*replica {
	s.mu.RLock()
	defer s.mu.RUnlock()
	rs := make([]*replica, 0, len(s.byTarget[target]))
	for _, r := range s.byTarget[target] {
		rs = append(rs, r)
	}
	return rs
}

// appendFailure marks every replica of the target down, creating the
// target's own replica when none exists so that a never-reachable target is
// visible.
func (s *Store) appendFailure(sc series.Scrape) {
	rs := s.targetReplicas(sc.Target)
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
				r.probesFailing, st.ProbeAnswered = 0, false
			}
			if sc.ProbeUp != nil {
				st.ProbeAnswered = *sc.ProbeUp && (r.probesFailing == 0 || st.ProbeAnswered)
				r.probesFailing++
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
	rs := s.targetReplicas(sc.Target)
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
	st.Up, st.Reason, st.Status, st.Error, st.ConsecutiveFailures, st.ProbeAnswered = true, "", 0, "", 0, false
	st.ConsecutiveSuccesses++
	r.setPod(sc, opts.Retention)
	r.info.Address = sc.Address
	switch {
	case g.Worker != "" && sc.Kind != detect.KindGPU:
		// A worker behind a gateway's /engine_metrics is an engine, whatever
		// the target's kind, and serves at its worker address; a
		// dcgm-exporter's groups are its GPUs.
		r.info.Kind = "engine"
		r.info.Address = g.Worker
	case sc.Kind != "":
		r.info.Kind = sc.Kind
	}
	if g.Model != "" {
		r.info.Model = g.Model
	} else if m := sc.Labels["model"]; m != "" && r.info.Model == "" {
		r.info.Model = m // discovery knows the model when the exposition does not say
	}
	switch {
	case g.Labels != nil:
		// The replica's own (a GPU's identity and pod), not the exporter's.
		if !maps.Equal(r.info.Labels, g.Labels) {
			r.info.Labels = maps.Clone(g.Labels)
		}
	case sc.Labels != nil:
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
