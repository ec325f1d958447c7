package persist_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/persist"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// store is an in-memory Store that records every write in order. A write
// can be made to fail (per document) or to block until released.
type store struct {
	mu      sync.Mutex
	docs    map[string][]byte
	writes  []string // "name=json" in the order written
	fail    map[string]error
	gate    chan struct{} // non-nil: each Save waits for a value or its closing
	started int           // Saves begun
}

func newStore() *store { return &store{docs: map[string][]byte{}, fail: map[string]error{}} }

func (s *store) Load(name string, v any, _ time.Time) error {
	s.mu.Lock()
	b, ok := s.docs[name]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return json.Unmarshal(b, v)
}

func (s *store) Save(name string, v any) error {
	if gate := s.begin(); gate != nil {
		<-gate
	}
	return s.commit(name, v)
}

// begin counts a write and returns the gate it must pass.
func (s *store) begin() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.started++
	return s.gate
}

// commit stores v as document name, or fails as set.
func (s *store) commit(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fail[name]; err != nil {
		return err
	}
	s.docs[name] = b
	s.writes = append(s.writes, name+"="+string(b))
	return nil
}

func (s *store) block() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
	return s.gate
}

func (s *store) setFail(name string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[name] = err
}

func (s *store) put(name, js string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[name] = []byte(js)
}

func (s *store) raw(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.docs[name])
}

func (s *store) written() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.writes)
}

func (s *store) begun() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started
}

// rig runs a Writer over a store inside a synctest bubble.
type rig struct {
	w      *persist.Writer
	reg    *prometheus.Registry
	logs   *observer.ObservedLogs
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, s persist.Store, order ...string) *rig {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	reg := prometheus.NewRegistry()
	w := persist.New(s, persist.Options{Order: order, Logger: zap.New(core), Metrics: persist.NewMetrics(reg)})
	ctx, cancel := context.WithCancel(t.Context())
	r := &rig{w: w, reg: reg, logs: logs, cancel: cancel, done: make(chan struct{})}
	go func() { _ = w.Run(ctx); close(r.done) }()
	return r
}

func (r *rig) stop() {
	r.cancel()
	<-r.done
}

// failures is watchdog_state_write_failures_total of document name.
func (r *rig) failures(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "watchdog_state_write_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == name {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func unwritten(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "watchdog_state_unwritten_documents" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("watchdog_state_unwritten_documents not found")
	return 0
}

type doc struct {
	V []int `json:"v"`
}

func load(t *testing.T, w *persist.Writer, name string) string {
	t.Helper()
	var d doc
	if err := w.Load(name, &d, time.Now()); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(d.V)
}

// Save returns while the store blocks (a synctest bubble would report the
// deadlock otherwise), Load reads what was saved, and the saves made during
// a write coalesce into one write of the newest version.
func TestSaveDoesNoIOAndSavesCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		release := s.block()
		r := start(t, s)
		v := &doc{V: []int{1}}
		if err := r.w.Save("alerts", v); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the write of [1] is under way, blocked
		if s.begun() != 1 {
			t.Fatalf("writes begun = %d, want 1", s.begun())
		}
		for i := 2; i <= 4; i++ {
			v.V = append(v.V, i)
			if err := r.w.Save("alerts", v); err != nil {
				t.Fatal(err)
			}
		}
		v.V[0] = 99 // changed after the save: not what is written
		if got := load(t, r.w, "alerts"); got != "[1 2 3 4]" {
			t.Errorf("Load during the write = %s, want the newest saved [1 2 3 4]", got)
		}
		if got := unwritten(t, r.reg); got != 1 {
			t.Errorf("unwritten documents = %v, want 1", got)
		}
		close(release)
		synctest.Wait()
		if got, want := s.written(), []string{`alerts={"v":[1]}`, `alerts={"v":[1,2,3,4]}`}; !slices.Equal(got, want) {
			t.Errorf("writes %q, want %q: the three saves during the first write are one write", got, want)
		}
		if got := unwritten(t, r.reg); got != 0 {
			t.Errorf("unwritten documents = %v after the writes, want 0", got)
		}
		if got := load(t, r.w, "alerts"); got != "[1 2 3 4]" {
			t.Errorf("Load after the write = %s", got)
		}
		r.stop()
	})
}

// A document's pending version is what Load returns; one never saved is
// read from the store.
func TestLoadFallsBackToTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		s.put("silenced_pages", `{"v":[7]}`)
		r := start(t, s)
		if got := load(t, r.w, "silenced_pages"); got != "[7]" {
			t.Errorf("Load = %s, want the stored [7]", got)
		}
		if got := load(t, r.w, "absent"); got != "[]" {
			t.Errorf("Load of a missing document = %s, want it untouched", got)
		}
		r.stop()
	})
}

// The ordering guarantee: a failing outbox write holds back the alert
// state saved after it, while the documents of its own rank are written;
// the failure is counted per write, logged once, returned by the next
// Save of the document, and once the store recovers the outbox goes first.
func TestFailingEarlierDocumentHoldsBackLaterOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		r := start(t, s, "notify-*", "alerts")
		if err := r.w.Save("alerts", doc{V: []int{1}}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := s.raw("alerts"); got != `{"v":[1]}` {
			t.Fatalf("alerts = %s, want the first version written", got)
		}

		s.setFail("notify-slack", errors.New("configmaps is forbidden"))
		// The writer is kept in a write of another document while the
		// three below are saved, so that one batch holds all three (it
		// would otherwise be free to take alerts [2] alone, and rightly
		// write it: it was saved before the others).
		gate := s.block()
		r.w.Save("other", doc{V: []int{0}})
		synctest.Wait()
		r.w.Save("alerts", doc{V: []int{2}}) // saved first, ranked last
		r.w.Save("notify-slack", doc{V: []int{10}})
		r.w.Save("notify-pagerduty", doc{V: []int{20}})
		close(gate)
		synctest.Wait()
		if got := s.raw("alerts"); got != `{"v":[1]}` {
			t.Errorf("alerts = %s while notify-slack is not written; want [1] held", got)
		}
		if got := s.raw("notify-pagerduty"); got != `{"v":[20]}` {
			t.Errorf("notify-pagerduty = %q: a document of the failing one's rank must be written", got)
		}
		if got := r.failures(t, "notify-slack"); got != 1 {
			t.Errorf("failures = %v, want 1", got)
		}
		err := r.w.Save("notify-slack", doc{V: []int{11}})
		if err == nil || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("Save of a failing document = %v, want its write error", err)
		}
		time.Sleep(time.Second) // the first retry, after RetryInitial
		synctest.Wait()
		if got := r.failures(t, "notify-slack"); got != 2 {
			t.Errorf("failures after one retry = %v, want 2", got)
		}
		if n := r.logs.FilterMessageSnippet("writing a state document failed").Len(); n != 1 {
			t.Errorf("failure logged %d times, want once per streak", n)
		}

		s.setFail("notify-slack", nil)
		before := len(s.written())
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got, want := s.written()[before:], []string{`notify-slack={"v":[11]}`, `alerts={"v":[2]}`}; !slices.Equal(got, want) {
			t.Errorf("writes after recovery %q, want %q", got, want)
		}
		if err := r.w.Save("notify-slack", doc{V: []int{12}}); err != nil {
			t.Errorf("Save after recovery = %v", err)
		}
		if n := r.logs.FilterMessageSnippet("written again").Len(); n != 1 {
			t.Errorf("recovery logged %d times, want once", n)
		}
		r.stop()
	})
}

// A store that keeps failing is retried with a doubling wait, not in a
// loop, and saves during the wait do not bring the retry forward.
func TestFailedWritesBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		s.setFail("alerts", errors.New("disk full"))
		r := start(t, s)
		r.w.Save("alerts", doc{V: []int{1}})
		synctest.Wait()
		time.Sleep(500 * time.Millisecond)
		r.w.Save("alerts", doc{V: []int{2}})
		synctest.Wait()
		if n := s.begun(); n != 1 {
			t.Errorf("writes begun before the first retry = %d, want 1", n)
		}
		time.Sleep(9500 * time.Millisecond) // t = 10s: retries at 1s, 3s, 7s
		synctest.Wait()
		if n := s.begun(); n != 4 {
			t.Errorf("writes in 10s of failures = %d, want 4 (1s, 2s, 4s apart)", n)
		}
		r.stop()
	})
}

// Shutdown writes what is pending; a Save after Run has returned says it
// will not be written.
func TestShutdownFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		r := start(t, s)
		r.w.Save("notify-log", doc{V: []int{5}})
		r.stop()
		if got := s.raw("notify-log"); got != `{"v":[5]}` {
			t.Errorf("after shutdown notify-log = %q, want it written", got)
		}
		if err := r.w.Save("notify-log", doc{V: []int{6}}); !errors.Is(err, persist.ErrStopped) {
			t.Errorf("Save after Run returned = %v, want ErrStopped", err)
		}
	})
}

// The final flush is bounded: a store that keeps failing does not hold up
// the exit beyond the flush timeout, and what is left is named in the log.
func TestShutdownFlushIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		s.setFail("incidents", errors.New("read-only file system"))
		r := start(t, s)
		synctest.Wait()
		r.w.Save("incidents", doc{V: []int{1}})
		begin := time.Now()
		r.stop()
		if d := time.Since(begin); d != persist.DefaultFlushTimeout {
			t.Errorf("Run returned %s after cancel, want the flush timeout %s", d, persist.DefaultFlushTimeout)
		}
		left := r.logs.FilterMessageSnippet("stopping with state documents not written").All()
		if len(left) != 1 || !strings.Contains(fmt.Sprint(left[0].ContextMap()["documents"]), "incidents") {
			t.Errorf("unwritten documents at exit not logged by name: %v", left)
		}
	})
}

// switchable is a store that, like internal/kubestore, can be made
// read-only: then Save writes nothing and returns nil, and a write under
// way is abandoned.
type switchable struct {
	*store
	mu       sync.Mutex
	writable bool
	abort    chan struct{}
}

func newSwitchable(writable bool) *switchable {
	return &switchable{store: newStore(), writable: writable, abort: make(chan struct{})}
}

func (s *switchable) Writable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writable
}

func (s *switchable) SetWritable(w bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w == s.writable {
		return
	}
	s.writable = w
	if !w {
		close(s.abort)
	} else {
		s.abort = make(chan struct{})
	}
}

func (s *switchable) Save(name string, v any) error {
	s.mu.Lock()
	writable, abort := s.writable, s.abort
	s.mu.Unlock()
	if !writable {
		return nil
	}
	if gate := s.begin(); gate != nil {
		select {
		case <-gate:
		case <-abort:
			return nil // leadership lost during the write: abandoned
		}
	}
	return s.commit(name, v)
}

// Losing the lease: this copy's pending versions are dropped and never
// written, the write under way is abandoned before SetWritable returns,
// later saves are not kept, and after regaining it Load reads what the
// other leader wrote, not this copy's stale versions.
func TestLosingWritabilityDropsPendingVersions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSwitchable(true)
		release := s.block()
		r := start(t, s, "notify-*", "alerts")
		r.w.Save("notify-slack", doc{V: []int{1}})
		synctest.Wait() // writing [1], blocked
		r.w.Save("notify-slack", doc{V: []int{2}})
		r.w.Save("alerts", doc{V: []int{2}})

		r.w.SetWritable(false)
		if s.Writable() {
			t.Fatal("SetWritable(false) did not reach the store")
		}
		close(release) // the abandoned write would have passed now
		r.w.Save("notify-slack", doc{V: []int{3}})
		if got := unwritten(t, r.reg); got != 0 {
			t.Errorf("unwritten documents on a follower = %v, want 0", got)
		}
		// The new leader writes its state.
		s.put("notify-slack", `{"v":[100]}`)
		s.put("alerts", `{"v":[100]}`)
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := s.written(); len(got) != 0 {
			t.Errorf("a copy that lost the lease wrote %q", got)
		}
		if got := load(t, r.w, "notify-slack"); got != "[100]" {
			t.Errorf("follower Load = %s, want the leader's [100]", got)
		}

		r.w.SetWritable(true)
		if !s.Writable() {
			t.Fatal("SetWritable(true) did not reach the store")
		}
		for _, name := range []string{"notify-slack", "alerts"} {
			if got := load(t, r.w, name); got != "[100]" {
				t.Errorf("Load of %s at takeover = %s, want the old leader's [100], not this copy's stale version", name, got)
			}
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := s.written(); len(got) != 0 {
			t.Errorf("stale versions written after retaking the lease: %q", got)
		}
		r.w.Save("alerts", doc{V: []int{4}})
		synctest.Wait()
		if got := s.raw("alerts"); got != `{"v":[4]}` {
			t.Errorf("alerts = %s, want the new save written", got)
		}
		r.stop()
	})
}

// Over a store that cannot abandon a write, SetWritable(false) waits for
// the write under way to end: once it returns, nothing more is written.
func TestLosingWritabilityWaitsForTheWriteUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		release := s.block()
		r := start(t, s)
		r.w.Save("alerts", doc{V: []int{1}})
		synctest.Wait()
		switched := make(chan struct{})
		go func() { r.w.SetWritable(false); close(switched) }()
		synctest.Wait()
		select {
		case <-switched:
			t.Fatal("SetWritable(false) returned while a write was under way")
		default:
		}
		close(release)
		<-switched
		r.stop()
	})
}

// A Writer over a store that starts read-only (a follower's ConfigMap)
// keeps nothing until it is made writable.
func TestWriterStartsReadOnlyOverReadOnlyStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSwitchable(false)
		r := start(t, s)
		if err := r.w.Save("alerts", doc{V: []int{1}}); err != nil {
			t.Fatal(err)
		}
		if got := load(t, r.w, "alerts"); got != "[]" {
			t.Errorf("a follower kept its save: Load = %s", got)
		}
		r.w.SetWritable(true)
		r.w.Save("alerts", doc{V: []int{2}})
		synctest.Wait()
		if got := s.raw("alerts"); got != `{"v":[2]}` {
			t.Errorf("alerts = %q after becoming writable", got)
		}
		r.stop()
	})
}

func TestMetricsLint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newStore()
		s.setFail("alerts", errors.New("x"))
		r := start(t, s)
		r.w.Save("alerts", doc{})
		synctest.Wait()
		problems, err := testutil.GatherAndLint(r.reg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
		s.setFail("alerts", nil)
		r.stop()
	})
}
