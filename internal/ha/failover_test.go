package ha

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// calls records, in order, what the Failover asked of its collaborators.
type calls struct{ log []string }

func (c *calls) add(format string, a ...any) { c.log = append(c.log, fmt.Sprintf(format, a...)) }

type fakeElector struct{ fn func(bool) }

func (e *fakeElector) OnChange(fn func(bool))        { e.fn = fn }
func (e *fakeElector) Run(ctx context.Context) error { <-ctx.Done(); return nil }

type fakeStore struct{ c *calls }

func (s fakeStore) SetWritable(w bool) { s.c.add("store writable=%v", w) }

type fakeDispatcher struct {
	c    *calls
	open []notify.Event
	err  error
}

func (d fakeDispatcher) SetActive(a bool, _ time.Time) error {
	d.c.add("dispatcher active=%v", a)
	return d.err
}

func (d fakeDispatcher) OpenIncidents() []notify.Event {
	d.c.add("dispatcher open incidents")
	return d.open
}

type fakeEvaluator struct{ c *calls }

func (e fakeEvaluator) Takeover(open []notify.Event, _ time.Time) {
	var fps []string
	for _, ev := range open {
		fps = append(fps, ev.Fingerprint)
	}
	e.c.add("evaluator takeover %v", fps)
}

func newFailover(t *testing.T, dispatchErr error) (*fakeElector, *calls, *observer.ObservedLogs) {
	t.Helper()
	c := &calls{}
	el := &fakeElector{}
	core, logs := observer.New(zapcore.InfoLevel)
	_, err := New(Options{
		Elector: el, Store: fakeStore{c},
		Dispatcher: fakeDispatcher{c: c, open: []notify.Event{{Fingerprint: "fp1"}}, err: dispatchErr},
		Evaluator:  fakeEvaluator{c}, Now: func() time.Time { return time.Unix(1000, 0) }, Logger: zap.New(core),
	})
	if err != nil {
		t.Fatal(err)
	}
	if el.fn == nil {
		t.Fatal("New did not register with the elector")
	}
	return el, c, logs
}

// Gaining the lease: the store becomes writable before the dispatcher reads
// and rewrites the old leader's records, and the evaluator continues the
// incidents the dispatcher holds open. Losing it: the store stops writing
// before anything else, and nothing is taken over.
func TestSwitchOrder(t *testing.T) {
	el, c, _ := newFailover(t, nil)
	el.fn(true)
	want := []string{"store writable=true", "dispatcher active=true", "dispatcher open incidents", "evaluator takeover [fp1]"}
	if !slices.Equal(c.log, want) {
		t.Errorf("taking over: %q, want %q", c.log, want)
	}
	c.log = nil
	el.fn(false)
	want = []string{"store writable=false", "dispatcher active=false"}
	if !slices.Equal(c.log, want) {
		t.Errorf("stepping down: %q, want %q", c.log, want)
	}
}

// Unreadable notification state does not stop a takeover: the incidents
// are still continued (duplicate pages are better than none) and the
// failure is logged.
func TestTakeoverGoesOnWhenStateIsUnreadable(t *testing.T) {
	el, c, logs := newFailover(t, errors.New("configmap: decode failed"))
	el.fn(true)
	if c.log[len(c.log)-1] != "evaluator takeover [fp1]" {
		t.Errorf("calls %q: the incidents were not taken over", c.log)
	}
	if logs.FilterLevelExact(zapcore.ErrorLevel).Len() != 1 {
		t.Errorf("the unreadable state was not logged as an error: %v", logs.All())
	}
}

func TestNewNeedsEveryCollaborator(t *testing.T) {
	if _, err := New(Options{Elector: &fakeElector{}}); err == nil {
		t.Error("a failover without store, dispatcher, evaluator and clock was accepted")
	}
}
