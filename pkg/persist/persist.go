// Package persist writes the watchdog's small JSON state documents (the
// notification outboxes, the firing alerts, the held pages, the incident
// journal) without making their owners wait for the store.
//
// A Writer stands in for a store: internal/state's directory or, in HA,
// internal/kubestore's ConfigMap, where one write is a PUT to the API
// server. Save encodes the document at once (the caller may change it
// afterwards), keeps the bytes as the document's pending version and
// returns: nothing is read or written on the caller's goroutine, whatever
// the store. Run writes the pending documents on its own goroutine, outside
// every caller's lock. The saves of a document made while it waits, or
// while its write is under way, coalesce: the next write carries the newest
// bytes, once. Load returns a document's pending bytes when it has some (a
// caller reads what it saved), else reads the store.
//
// A failed write is counted (watchdog_state_write_failures_total) and
// logged once per failure streak of the document; the document stays
// pending and is written again after a backoff, with its newest bytes.
// Until one of its writes succeeds, Save of that document returns an error
// saying so, which keeps its owner's own failure metric and log meaningful.
// When Run's context ends, it writes what is pending for at most the flush
// timeout and returns.
//
// # Order
//
// Each batch takes the newest bytes of every pending document at once and
// writes them in the order of Options.Order, documents of one rank in name
// order. When a write fails, the documents of later ranks are held back
// until a batch writes every earlier one. Hence the guarantee: if Order
// ranks document A before document B, a version of B saved at time t is
// written only once A's content as of t (or a newer one) has been written.
// Nothing is promised between documents of one rank, nor for a store that
// reports a write as done without making it durable.
//
// # What the watchdog gets from it
//
// The evaluation loop hands each round's events to the dispatcher, whose
// queues save their outboxes ("notify-<integration>"), before it saves the
// alert state ("alerts"), and the daemon ranks "notify-*" before "alerts".
// So the alert state on disk is never ahead of the outboxes: an event
// enqueued but not yet written when the process dies is lost only together
// with the alert state of the round that produced it (and of every later
// round). The restarted tracker holds the firing alerts of an earlier round
// (Tracker.Restore) and adds the incidents the notifiers' records hold
// open (Tracker.RestoreIncidents):
//
//   - a lost trigger or update: the tracker does not believe it paged (or
//     escalated). If the condition is still there, it pages again once the
//     detectors see it in their refilled windows and the pending period
//     (alerts.for) has passed: late, not lost. If the condition ended
//     before the restart, nothing is paged for it.
//   - a lost resolve: the alert state still holds the alert firing; not seen
//     again, it resolves after alerts.restore_grace and the resolve is sent
//     then.
//
// The price of the order: while an outbox cannot be written (a ConfigMap
// over its size limit, say), the alert state is not written either.
//
// Two limits. The outboxes are written one document at a time: after a
// crash between two of them, or while one of them keeps failing, an
// incident can be in one integration's outbox (the built-in log's, first
// by name) and not in another's. RestoreIncidents then restores it, the
// tracker believes it paged, and the other integration gets it only with
// the incident's next update, repeat (alerts.repeat_interval) or resolve.
// And delivery does not wait for the write: an event can reach the
// provider before its outbox is written. After a crash in between, the
// restarted daemon sends it again (Slack may post a second message;
// PagerDuty deduplicates on the incident key), and a trigger delivered that
// way whose condition is gone by the restart is never resolved by the
// watchdog: it stays open at the provider until someone closes it. The
// window is the time from a save to its write: about one write when the
// store is healthy, a whole failure streak when it is not.
//
// # Leadership
//
// In HA only the leader writes. SetWritable(false) drops every pending
// document (the new leader's state is the one that counts), passes the
// switch on to the store (internal/kubestore aborts a write under way) and
// returns once no write of this Writer is under way: after it, nothing
// this copy saved reaches the store, and Load reads the store. A Writer
// over a store that says it is not writable starts that way.
package persist

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
)

// Store keeps JSON documents (internal/state.Dir, internal/kubestore.Store).
// Load leaves v untouched and returns nil when the document does not exist.
type Store interface {
	Load(name string, v any, now time.Time) error
	Save(name string, v any) error
}

// Defaults of Options.
const (
	DefaultRetryInitial = time.Second
	DefaultRetryMax     = time.Minute
	DefaultFlushTimeout = 10 * time.Second
)

// ErrStopped is wrapped by Save after Run has returned: the document is
// kept for Load but nothing writes it.
var ErrStopped = errors.New("the state writer has stopped")

// Options of a Writer.
type Options struct {
	// Order ranks documents: an entry is a document name, or a name prefix
	// when it ends in "*". Documents match their first entry; those
	// matching none come last. See the package documentation.
	Order []string
	// RetryInitial is the wait after a batch with a failed write; it
	// doubles with every failed batch up to RetryMax.
	RetryInitial time.Duration
	RetryMax     time.Duration
	// FlushTimeout bounds the writing of what is pending at shutdown.
	FlushTimeout time.Duration
	Logger       *zap.Logger
	// Metrics, shared by the writers of one process; nil: not registered.
	Metrics *Metrics
}

// Metrics of the writers of one process.
type Metrics struct {
	failures  *prometheus.CounterVec
	unwritten prometheus.Gauge
}

// NewMetrics registers the writers' metrics on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_state_write_failures_total",
			Help: "Failed writes of a state document to its store; the document is written again after a backoff.",
		}, []string{"document"}),
		unwritten: f.NewGauge(prometheus.GaugeOpts{
			Name: "watchdog_state_unwritten_documents",
			Help: "State documents saved but not yet written to their store.",
		}),
	}
}

// Writer writes state documents asynchronously; see the package
// documentation. It is safe for concurrent use.
type Writer struct {
	store Store
	opts  Options
	log   *zap.Logger
	m     *Metrics
	wake  chan struct{}

	mu       sync.Mutex
	docs     map[string]*document
	writable bool
	// epoch changes when pending documents are dropped, so that a batch
	// taken before does not write or settle them.
	epoch uint64
	// writing is closed when the write under way ends; nil when none is.
	writing chan struct{}
	stopped bool
}

// document is what the Writer knows of one document.
type document struct {
	data     []byte // the newest bytes not yet written; nil when written
	seq      uint64 // counts the saves, so a write settles only its version
	err      error  // the last write's failure; nil once one succeeds
	failures int    // failed writes in the current streak
}

// New returns a Writer over store. It starts nothing; Run writes.
func New(store Store, opts Options) *Writer {
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = DefaultRetryInitial
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = DefaultRetryMax
	}
	opts.RetryMax = max(opts.RetryMax, opts.RetryInitial)
	if opts.FlushTimeout <= 0 {
		opts.FlushTimeout = DefaultFlushTimeout
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics(nil)
	}
	writable := true
	if s, ok := store.(interface{ Writable() bool }); ok {
		writable = s.Writable()
	}
	return &Writer{store: store, opts: opts, log: opts.Logger, m: opts.Metrics,
		wake: make(chan struct{}, 1), docs: map[string]*document{}, writable: writable}
}

// Save encodes v as document name's newest version, to be written by Run.
// It returns an error when v cannot be encoded, when the document's last
// write failed (the version is kept and written on the next retry), and
// after Run has returned. A Writer that is not writable keeps nothing and
// returns nil, as a follower's store does.
func (w *Writer) Save(name string, v any) error {
	w.mu.Lock()
	writable := w.writable
	w.mu.Unlock()
	if !writable {
		return nil // a follower's saves are frequent: not even encoded
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state %s: encode: %w", name, err)
	}
	w.mu.Lock()
	if !w.writable {
		w.mu.Unlock()
		return nil
	}
	d := w.docs[name]
	if d == nil {
		d = &document{}
		w.docs[name] = d
	}
	if d.data == nil {
		w.m.unwritten.Inc()
	}
	d.data, d.seq = data, d.seq+1
	failing, stopped := d.err, w.stopped
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	switch {
	case stopped:
		return fmt.Errorf("state %s: not written: %w", name, ErrStopped)
	case failing != nil:
		return fmt.Errorf("state %s: not written yet, its last write failed (retrying): %w", name, failing)
	}
	return nil
}

// Load decodes document name into v: its pending version when it has one,
// else the stored one.
func (w *Writer) Load(name string, v any, now time.Time) error {
	w.mu.Lock()
	var data []byte
	if d := w.docs[name]; d != nil {
		data = d.data // never modified once set: safe to read unlocked
	}
	w.mu.Unlock()
	if data == nil {
		return w.store.Load(name, v, now)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("state %s: decode the unwritten version: %w", name, err)
	}
	return nil
}

// SetWritable makes the Writer write (the leader) or drop what it holds
// and keep nothing (a follower). It passes the switch on to the store when
// the store has SetWritable (internal/kubestore), so that the Writer can
// stand for the store in the HA takeover sequence. Losing writability, it
// returns once no write of this Writer is under way.
func (w *Writer) SetWritable(writable bool) {
	sw, switches := w.store.(interface{ SetWritable(bool) })
	if writable {
		if switches {
			sw.SetWritable(true)
		}
		w.mu.Lock()
		w.writable = true
		w.mu.Unlock()
		return
	}
	var dropped []string
	w.mu.Lock()
	writing := w.writing
	if w.writable {
		w.writable = false
		w.epoch++
		for name, d := range w.docs {
			if d.data != nil {
				dropped = append(dropped, name)
				w.m.unwritten.Dec()
			}
		}
		clear(w.docs)
	}
	w.mu.Unlock()
	if switches {
		sw.SetWritable(false)
	}
	if writing != nil {
		<-writing // no later write starts: the epoch has changed
	}
	if len(dropped) > 0 {
		slices.Sort(dropped)
		w.log.Info("not writing state any more: dropped the unwritten versions, the store's are authoritative",
			zap.Strings("documents", dropped))
	}
}

// Run writes pending documents until ctx is done, then for at most the
// flush timeout writes what is still pending, and returns.
func (w *Writer) Run(ctx context.Context) error {
	failed := 0 // consecutive batches with a failed write
	for ctx.Err() == nil {
		if failed > 0 {
			if !sleep(ctx, w.retryDelay(failed)) {
				break
			}
		} else {
			select {
			case <-ctx.Done():
				continue
			case <-w.wake:
			}
		}
		if w.writeBatch() {
			failed = 0
		} else {
			failed++
		}
	}
	w.flush()
	return nil
}

// flush writes what is pending, retrying failures, for at most the flush
// timeout, then stops the Writer.
func (w *Writer) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.FlushTimeout)
	defer cancel()
	failed := 0
	for w.isWritable() && len(w.unwritten()) > 0 {
		if failed > 0 && !sleep(ctx, w.retryDelay(failed)) {
			break
		}
		if w.writeBatch() {
			failed = 0
		} else {
			failed++
		}
	}
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
	if left := w.unwritten(); len(left) > 0 {
		w.log.Error("stopping with state documents not written; a restart reads their previous versions",
			zap.Strings("documents", left), zap.Duration("flush_timeout", w.opts.FlushTimeout))
	}
}

func (w *Writer) isWritable() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writable
}

// unwritten lists the pending documents by name.
func (w *Writer) unwritten() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name, d := range w.docs {
		if d.data != nil {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// retryDelay is the wait after the n-th consecutive failed batch.
func (w *Writer) retryDelay(n int) time.Duration {
	d := w.opts.RetryInitial
	for i := 1; i < n && d < w.opts.RetryMax; i++ {
		d *= 2
	}
	return min(d, w.opts.RetryMax)
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pendingWrite is one document of a batch.
type pendingWrite struct {
	name string
	data []byte
	seq  uint64
	rank int
}

// rank is the position of name's first matching Order entry.
func (w *Writer) rank(name string) int {
	for i, e := range w.opts.Order {
		if prefix, ok := strings.CutSuffix(e, "*"); (ok && strings.HasPrefix(name, prefix)) || e == name {
			return i
		}
	}
	return len(w.opts.Order)
}

// writeBatch writes the newest version of every pending document, in
// order, and reports whether none failed.
func (w *Writer) writeBatch() bool {
	w.mu.Lock()
	if !w.writable {
		w.mu.Unlock()
		return true
	}
	epoch := w.epoch
	var batch []pendingWrite
	for name, d := range w.docs {
		if d.data != nil {
			batch = append(batch, pendingWrite{name: name, data: d.data, seq: d.seq, rank: w.rank(name)})
		}
	}
	w.mu.Unlock()
	slices.SortFunc(batch, func(a, b pendingWrite) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), cmp.Compare(a.name, b.name))
	})
	failedRank := -1
	for _, p := range batch {
		if failedRank >= 0 && p.rank > failedRank {
			break // held back behind an earlier document that is not written
		}
		wrote, err := w.write(p, epoch)
		if !wrote {
			return true // no longer writable: what was pending is dropped
		}
		if err != nil {
			failedRank = p.rank
		}
		w.settle(p, epoch, err)
	}
	return failedRank < 0
}

// write writes one document unless the batch's epoch has passed.
func (w *Writer) write(p pendingWrite, epoch uint64) (wrote bool, err error) {
	w.mu.Lock()
	if !w.writable || w.epoch != epoch {
		w.mu.Unlock()
		return false, nil
	}
	done := make(chan struct{})
	w.writing = done
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.writing = nil
		w.mu.Unlock()
		close(done)
	}()
	return true, w.store.Save(p.name, json.RawMessage(p.data))
}

// settle records the outcome of writing p.
func (w *Writer) settle(p pendingWrite, epoch uint64, err error) {
	w.mu.Lock()
	d := w.docs[p.name]
	if w.epoch != epoch || d == nil {
		w.mu.Unlock()
		return
	}
	streakStart, recovered := false, 0
	if err != nil {
		w.m.failures.WithLabelValues(p.name).Inc()
		streakStart = d.err == nil
		d.err = err
		d.failures++
	} else {
		if d.err != nil {
			recovered = d.failures
		}
		d.err, d.failures = nil, 0
		if d.seq == p.seq {
			d.data = nil
			w.m.unwritten.Dec()
		}
	}
	w.mu.Unlock()
	switch {
	case streakStart:
		w.log.Error("writing a state document failed; its newest version stays pending and is retried, and a restart now would read an older one",
			zap.String("document", p.name), zap.Error(err))
	case recovered > 0:
		w.log.Info("state document written again", zap.String("document", p.name), zap.Int("failed_writes", recovered))
	}
}
