package notify_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var testOpts = notify.QueueOptions{
	InitialBackoff:   time.Second,
	MaxBackoff:       time.Minute,
	MaxRetryDuration: 10 * time.Minute,
	AttemptTimeout:   5 * time.Second,
	DrainTimeout:     5 * time.Second,
}

// rig is a dispatcher with recording pagerduty and slack integrations.
type rig struct {
	d        *notify.Dispatcher
	pd, sl   *notifytest.Recorder
	store    *notifytest.MemStore
	reg      *prometheus.Registry
	logs     *observer.ObservedLogs
	logOut   *bytes.Buffer
	cancel   context.CancelFunc
	done     chan struct{}
	startErr error
}

func newRig(t *testing.T, store *notifytest.MemStore, pd, sl *notifytest.Recorder) *rig {
	t.Helper()
	return newCopy(t, store, pd, sl, false)
}

// newCopy is one watchdog copy (of a highly available pair, when standby
// starts it as a follower): a dispatcher on the store, delivering through
// the recorders.
func newCopy(t *testing.T, store *notifytest.MemStore, pd, sl *notifytest.Recorder, standby bool) *rig {
	t.Helper()
	return newCopyWith(t, store, pd, sl, standby, testOpts, testOpts)
}

// newCopyWith is newCopy with the queue options of each integration.
func newCopyWith(t *testing.T, store *notifytest.MemStore, pd, sl *notifytest.Recorder, standby bool, pdOpts, slOpts notify.QueueOptions) *rig {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	r := &rig{pd: pd, sl: sl, store: store, reg: prometheus.NewRegistry(), logs: logs, logOut: &bytes.Buffer{}}
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{
			{Name: "pagerduty", Notifier: pd, Options: pdOpts},
			{Name: "slack", Notifier: sl, Options: slOpts},
		},
		Routes:     notify.DefaultRoutes(),
		Store:      store,
		Logger:     zap.New(core),
		Registerer: r.reg,
		LogWriter:  r.logOut,
		Standby:    standby,
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.d = d
	return r
}

// start runs the dispatcher; stop cancels it and waits for Run to return.
func (r *rig) start(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() {
		_ = r.d.Run(ctx)
		close(r.done)
	}()
}

func (r *rig) stop() {
	r.cancel()
	<-r.done
}

// advance moves the bubble's fake clock by d and lets every goroutine
// settle. Only valid inside a synctest bubble.
func advance(d time.Duration) {
	<-time.After(d)
	synctest.Wait()
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

func kinds(evs []notify.Event) string {
	var s []string
	for _, e := range evs {
		s = append(s, fmt.Sprintf("%s/%s", e.Fingerprint[:4], e.Kind))
	}
	return strings.Join(s, " ")
}

func at(ev notify.Event, now time.Time) notify.Event {
	ev.StartsAt, ev.At = now, now
	return ev
}

func TestRoutingBySeverity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, notifytest.NewMemStore(), &notifytest.Recorder{}, &notifytest.Recorder{})
		r.start(t)
		now := time.Now()
		crit := at(notifytest.PreemptStorm(now), now)
		warn := at(notifytest.RetryAvalanche(now), now)
		info := at(notifytest.CacheCollapse(now), now)
		info.Severity = detect.Info
		r.d.Send(crit)
		r.d.Send(warn)
		r.d.Send(info)
		synctest.Wait()
		if got, want := kinds(r.pd.Delivered()), "5f1c/trigger"; got != want {
			t.Errorf("pagerduty got %q, want %q", got, want)
		}
		if got, want := kinds(r.sl.Delivered()), "5f1c/trigger 9a4e/trigger"; got != want {
			t.Errorf("slack got %q, want %q", got, want)
		}
		for _, ev := range []notify.Event{crit, warn, info} {
			if !strings.Contains(r.logOut.String(), ev.Summary) {
				t.Errorf("log integration missed %s", ev.Class)
			}
		}
		// De-escalated to warning, then resolved: PagerDuty, which has the
		// incident open, still gets both, although warning routes to Slack only.
		later := time.Now()
		r.d.Send(notifytest.Update(crit, later, detect.Warning))
		r.d.Send(notifytest.Resolve(notifytest.Update(crit, later, detect.Warning), later))
		synctest.Wait()
		// The update is either delivered before the resolve arrives or
		// superseded by it; the resolve always comes last.
		if got := kinds(r.pd.Delivered()); got != "5f1c/trigger 5f1c/resolve" && got != "5f1c/trigger 5f1c/update 5f1c/resolve" {
			t.Errorf("pagerduty got %q, want trigger [update] resolve", got)
		}
		r.stop()
	})
}

func TestRouteConfigValidate(t *testing.T) {
	if err := notify.DefaultRoutes().Validate(); err != nil {
		t.Fatalf("default routes invalid: %v", err)
	}
	bad := notify.RouteConfig{Routes: []notify.Route{
		{Severities: []string{"critical", "page"}, Integrations: []string{"slack"}},
		{Classes: []string{"Preempt Storm"}, Integrations: []string{"Slack!"}},
	}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("want an error")
	}
	for _, path := range []string{"routes[0].severities[1]", "routes[1].classes[0]", "routes[1].integrations[0]"} {
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name %s", err, path)
		}
	}
	custom := notify.RouteConfig{Routes: []notify.Route{
		{Classes: []string{"replica_down"}, Integrations: []string{"pagerduty"}},
		{Severities: []string{"critical", "warning"}, Integrations: []string{"slack"}},
	}}
	if got := custom.Match(notify.Event{Severity: detect.Warning, Class: "replica_down"}); len(got) != 1 || got[0] != "pagerduty" {
		t.Errorf("class route: got %v", got)
	}
	if got := custom.Match(notify.Event{Severity: detect.Info, Class: "preempt_storm"}); got != nil {
		t.Errorf("unmatched: got %v, want nil (log only)", got)
	}
}

// A 429 without Retry-After backs off exponentially from the initial
// delay and holds the integration meanwhile: two in a row delay a
// critical page by about 1 s + 2 s, not by a fixed pause each.
func TestRateLimitWithoutRetryAfterBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pd := &notifytest.Recorder{Fail: func(ev notify.Event, n int) error {
			if n < 2 {
				return notify.Throttled(errors.New("pagerduty: HTTP 429"))
			}
			return nil
		}}
		r := newRig(t, notifytest.NewMemStore(), pd, &notifytest.Recorder{})
		r.start(t)
		t0 := time.Now()
		r.d.Send(at(notifytest.PreemptStorm(t0), t0))
		synctest.Wait()
		advance(10 * time.Second)
		att := pd.Attempts()
		if len(att) != 3 || len(pd.Delivered()) != 1 {
			t.Fatalf("%d attempts, %d delivered; want 3 and 1", len(att), len(pd.Delivered()))
		}
		first, second := att[1].At.Sub(att[0].At), att[2].At.Sub(att[1].At)
		if first < 800*time.Millisecond || first > time.Second || second < 1600*time.Millisecond || second > 2*time.Second {
			t.Errorf("retries after %s and %s, want the backoff's ~1 s and ~2 s", first, second)
		}
		if got := counter(t, r.reg, "watchdog_notification_failures_total", "integration", "pagerduty", "reason", "rate_limited"); got != 2 {
			t.Errorf("rate_limited failures = %v, want 2", got)
		}
	})
}

// A 429 with Retry-After holds the whole integration: no attempt for any
// incident before the delay, then delivery resumes in order.
func TestRetryAfterIsHonouredExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pd := &notifytest.Recorder{}
		sl := &notifytest.Recorder{Fail: func(ev notify.Event, n int) error {
			if n == 0 {
				return notify.RetryAfter(errors.New("slack: rate limited"), 30*time.Second)
			}
			return nil
		}}
		r := newRig(t, notifytest.NewMemStore(), pd, sl)
		r.start(t)
		t0 := time.Now()
		a := at(notifytest.RetryAvalanche(t0), t0)
		b := at(notifytest.CacheCollapse(t0), t0)
		r.d.Send(a)
		r.d.Send(b)
		synctest.Wait()
		if n := len(sl.Attempts()); n != 1 {
			t.Fatalf("attempts right after the 429 = %d, want 1", n)
		}
		advance(30*time.Second - time.Millisecond)
		if n := len(sl.Attempts()); n != 1 {
			t.Fatalf("attempts before Retry-After elapsed = %d, want 1 (another incident must not hit the rate-limited API either)", n)
		}
		advance(time.Millisecond)
		att := sl.Attempts()
		if len(att) != 3 {
			t.Fatalf("attempts after Retry-After = %d, want 3", len(att))
		}
		if d := att[1].At.Sub(att[0].At); d != 30*time.Second {
			t.Errorf("retry came %s after the 429, want exactly 30s", d)
		}
		if got, want := kinds(sl.Delivered()), "9a4e/trigger c3d8/trigger"; got != want {
			t.Errorf("delivered %q, want %q", got, want)
		}
		if got := counter(t, r.reg, "watchdog_notification_failures_total", "integration", "slack", "reason", "rate_limited"); got != 1 {
			t.Errorf("rate_limited failures = %v, want 1", got)
		}
		if got := counter(t, r.reg, "watchdog_notification_retries_total", "integration", "slack"); got != 1 {
			t.Errorf("retries = %v, want 1", got)
		}
		r.stop()
	})
}

// Retryable failures back off exponentially; a resolve arriving while its
// trigger is still failing waits behind it and is delivered after it, and
// an unrelated incident is delivered meanwhile.
func TestResolveNeverOvertakesDelayedTrigger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		trig := at(notifytest.PreemptStorm(time.Now()), time.Now())
		failures := 0
		pd := &notifytest.Recorder{Fail: func(ev notify.Event, n int) error {
			if ev.Fingerprint == trig.Fingerprint && failures < 4 {
				failures++
				return notify.WithReason(errors.New("pagerduty: 503"), notify.ReasonServerError)
			}
			return nil
		}}
		r := newRig(t, notifytest.NewMemStore(), pd, &notifytest.Recorder{})
		r.d.Queue("pagerduty").SetRand(func() float64 { return 0 })
		r.start(t)
		r.d.Send(trig)
		synctest.Wait()
		// While the trigger backs off, the incident resolves and another one fires.
		advance(500 * time.Millisecond)
		r.d.Send(notifytest.Resolve(trig, time.Now()))
		other := at(notifytest.PreemptStorm(time.Now()), time.Now())
		other.Fingerprint = "0000ffff"
		r.d.Send(other)
		synctest.Wait()
		if got := kinds(pd.Delivered()); got != "0000/trigger" {
			t.Fatalf("delivered while the first trigger backs off: %q, want only the independent incident", got)
		}
		advance(time.Hour)
		if got, want := kinds(pd.Delivered()), "0000/trigger 5f1c/trigger 5f1c/resolve"; got != want {
			t.Errorf("delivered %q, want %q", got, want)
		}
		var times []time.Duration
		var last time.Time
		for _, a := range pd.Attempts() {
			if a.Event.Fingerprint != trig.Fingerprint {
				continue
			}
			if !last.IsZero() {
				times = append(times, a.At.Sub(last))
			}
			last = a.At
		}
		// Jitter draw fixed at 0: 0.8 × 1s, 2s, 4s, 8s; the resolve follows at once.
		want := []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 0}
		if fmt.Sprint(times) != fmt.Sprint(want) {
			t.Errorf("gaps between attempts %v, want %v", times, want)
		}
		if got := counter(t, r.reg, "watchdog_notification_retries_total", "integration", "pagerduty"); got != 4 {
			t.Errorf("retries = %v, want 4", got)
		}
		if got := counter(t, r.reg, "watchdog_notifications_total", "integration", "pagerduty", "result", "delivered"); got != 3 {
			t.Errorf("delivered = %v, want 3", got)
		}
		r.stop()
	})
}

// A permanent failure is counted, logged loudly and reported through the
// other integration; the incident's resolve is still delivered.
func TestPermanentFailureIsReportedThroughTheOtherIntegration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pd := &notifytest.Recorder{Fail: func(ev notify.Event, n int) error {
			if ev.Kind == notify.KindTrigger {
				return notify.WithReason(notify.Permanent(errors.New("pagerduty: 400 invalid event")), notify.ReasonInvalidPayload)
			}
			return nil
		}}
		sl := &notifytest.Recorder{}
		r := newRig(t, notifytest.NewMemStore(), pd, sl)
		r.start(t)
		trig := at(notifytest.PreemptStorm(time.Now()), time.Now())
		r.d.Send(trig)
		synctest.Wait()
		if n := len(pd.Attempts()); n != 1 {
			t.Errorf("permanent failure attempted %d times, want 1", n)
		}
		var notice *notify.Event
		for _, ev := range sl.Delivered() {
			if ev.Class == notify.ClassDeliveryFailure {
				notice = &ev
			}
		}
		if notice == nil {
			t.Fatalf("slack got no delivery-failure notice: %q", kinds(sl.Delivered()))
		}
		if !strings.Contains(notice.Summary, "pagerduty") || !strings.Contains(notice.Summary, "preempt_storm") || notice.Severity != detect.Warning {
			t.Errorf("notice does not name integration and incident: %+v", notice.Summary)
		}
		if got := counter(t, r.reg, "watchdog_notifications_total", "integration", "pagerduty", "result", "failed"); got != 1 {
			t.Errorf("failed = %v, want 1", got)
		}
		if got := counter(t, r.reg, "watchdog_notification_failures_total", "integration", "pagerduty", "reason", "invalid_payload"); got != 1 {
			t.Errorf("invalid_payload failures = %v, want 1", got)
		}
		if n := r.logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("NOTIFICATION LOST").Len(); n != 1 {
			t.Errorf("loud log lines = %d, want 1", n)
		}
		r.d.Send(notifytest.Resolve(trig, time.Now()))
		synctest.Wait()
		if got := kinds(pd.Delivered()); got != "5f1c/resolve" {
			t.Errorf("pagerduty delivered %q, want the resolve", got)
		}
		r.stop()
	})
}

// An event failing with retryable errors for longer than the max retry
// duration counts as permanently failed.
func TestMaxRetryDurationGivesUpAndReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sl := &notifytest.Recorder{Fail: func(notify.Event, int) error {
			return notify.WithReason(errors.New("slack: 500"), notify.ReasonServerError)
		}}
		pd := &notifytest.Recorder{}
		r := newRig(t, notifytest.NewMemStore(), pd, sl)
		r.start(t)
		r.d.Send(at(notifytest.RetryAvalanche(time.Now()), time.Now()))
		advance(9 * time.Minute)
		if got := counter(t, r.reg, "watchdog_notifications_total", "integration", "slack", "result", "failed"); got != 0 {
			t.Fatalf("gave up before the max retry duration")
		}
		advance(3 * time.Minute)
		if got := counter(t, r.reg, "watchdog_notifications_total", "integration", "slack", "result", "failed"); got != 1 {
			t.Errorf("failed = %v, want 1 after the max retry duration", got)
		}
		if r.d.Queue("slack").Len() != 0 {
			t.Errorf("given-up event still queued")
		}
		if got := kinds(pd.Delivered()); !strings.HasPrefix(got, "deli/trigger") {
			t.Errorf("pagerduty should get the delivery-failure notice, got %q", got)
		}
		r.stop()
	})
}

// Updates waiting behind a rate limit collapse into the newest; a resolve
// drops them, but the trigger and the resolve are both delivered.
func TestPendingUpdatesCollapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sl := &notifytest.Recorder{Fail: func(ev notify.Event, n int) error {
			if n == 0 {
				return notify.RetryAfter(errors.New("429"), time.Minute)
			}
			return nil
		}}
		r := newRig(t, notifytest.NewMemStore(), &notifytest.Recorder{}, sl)
		r.start(t)
		ev := at(notifytest.RetryAvalanche(time.Now()), time.Now())
		r.d.Send(ev)
		synctest.Wait()
		u1 := notifytest.Update(ev, time.Now(), detect.Warning)
		u2 := notifytest.Update(u1, time.Now(), detect.Warning)
		r.d.Send(u1)
		r.d.Send(u2)
		if got := r.d.Queue("slack").Pending(); len(got) != 2 || got[1].Seq != u2.Seq {
			t.Fatalf("pending %q, want trigger + newest update", kinds(got))
		}
		r.d.Send(notifytest.Resolve(u2, time.Now()))
		if got := kinds(r.d.Queue("slack").Pending()); got != "9a4e/trigger 9a4e/resolve" {
			t.Fatalf("pending %q, want trigger then resolve", got)
		}
		advance(time.Minute)
		if got := kinds(sl.Delivered()); got != "9a4e/trigger 9a4e/resolve" {
			t.Errorf("delivered %q", got)
		}
		r.stop()
	})
}

// Shutdown drains pending events; what cannot be delivered within the drain
// timeout stays in the store and is delivered by the next process.
func TestShutdownDrainsAndKeepsTheRestAcrossRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		down := true
		pd := &notifytest.Recorder{Fail: func(notify.Event, int) error {
			if down {
				return notify.WithReason(errors.New("pagerduty: connection refused"), notify.ReasonNetwork)
			}
			return nil
		}}
		sl := &notifytest.Recorder{}
		r := newRig(t, store, pd, sl)
		r.start(t)
		ev := at(notifytest.PreemptStorm(time.Now()), time.Now())
		r.d.Send(ev)
		synctest.Wait()
		start := time.Now()
		r.stop()
		if d := time.Since(start); d > testOpts.DrainTimeout {
			t.Errorf("Run took %s to return, drain timeout is %s", d, testOpts.DrainTimeout)
		}
		if got := kinds(sl.Delivered()); got != "5f1c/trigger" {
			t.Errorf("slack delivered %q", got)
		}
		// Restart: the trigger is still owed to PagerDuty.
		down = false
		r2 := newRig(t, store, pd, &notifytest.Recorder{})
		if got := kinds(r2.d.OpenIncidents()); got != "5f1c/trigger" {
			t.Errorf("open incidents after restart %q", got)
		}
		r2.start(t)
		advance(time.Minute) // the persisted backoff is honoured
		if got := kinds(pd.Delivered()); got != "5f1c/trigger" {
			t.Errorf("pagerduty delivered after restart %q", got)
		}
		r2.stop()
	})
}

// The newest record of a fingerprint is the newest by time: a new incident
// starts its sequence at 1 again, so an older incident's resolve (a higher
// sequence) that one integration still holds must not hide it at restart.
func TestRestartFindsANewIncidentBehindAnOldResolve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		pd, sl := &notifytest.Recorder{}, &notifytest.Recorder{}
		r := newRig(t, store, pd, sl)
		r.start(t)
		old := at(notifytest.PreemptStorm(time.Now()), time.Now())
		r.d.Send(old)
		upd := notifytest.Update(old, time.Now().Add(time.Minute), detect.Critical)
		advance(time.Minute)
		r.d.Send(upd)
		advance(time.Minute)
		r.d.Send(notifytest.Resolve(upd, time.Now()))
		synctest.Wait()
		// The same fault again, a new incident, a warning this time: only
		// Slack gets it, PagerDuty keeps the old resolve.
		advance(time.Hour)
		again := at(notifytest.PreemptStorm(time.Now()), time.Now())
		again.Severity = detect.Warning
		r.d.Send(again)
		synctest.Wait()
		r.stop()

		r2 := newRig(t, store, pd, &notifytest.Recorder{})
		open := r2.d.OpenIncidents()
		if len(open) != 1 || open[0].Kind != notify.KindTrigger || !open[0].At.Equal(again.At) {
			t.Fatalf("open incidents after restart %q, want the new incident's trigger", kinds(open))
		}
	})
}

// After a restart the re-emitted trigger of an open incident is an update
// for the integrations, and its resolve still reaches them.
func TestRestartDoesNotRetrigger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		pd, sl := &notifytest.Recorder{}, &notifytest.Recorder{}
		r := newRig(t, store, pd, sl)
		r.start(t)
		ev := at(notifytest.PreemptStorm(time.Now()), time.Now())
		r.d.Send(ev)
		synctest.Wait()
		r.stop()

		r2 := newRig(t, store, pd, sl)
		open := r2.d.OpenIncidents()
		if len(open) != 1 || open[0].Fingerprint != ev.Fingerprint || open[0].Seq != ev.Seq {
			t.Fatalf("OpenIncidents = %q, want the firing incident", kinds(open))
		}
		r2.start(t)
		advance(time.Minute)
		again := ev
		again.At = time.Now()
		r2.d.Send(again)
		synctest.Wait()
		r2.d.Send(notifytest.Resolve(ev, time.Now()))
		synctest.Wait()
		for name, rec := range map[string]*notifytest.Recorder{"pagerduty": pd, "slack": sl} {
			if got, want := kinds(rec.Delivered()), "5f1c/trigger 5f1c/update 5f1c/resolve"; got != want {
				t.Errorf("%s got %q, want %q", name, got, want)
			}
		}
		if open := r2.d.OpenIncidents(); len(open) != 0 {
			t.Errorf("still open after resolve: %q", kinds(open))
		}
		// A duplicate resolve (say, the tracker re-resolving after another restart) is skipped.
		r2.d.Send(notifytest.Resolve(ev, time.Now()))
		synctest.Wait()
		if n := len(pd.Delivered()); n != 3 {
			t.Errorf("duplicate resolve delivered again")
		}
		r2.stop()
	})
}

func TestCorruptStateIsReportedNotFatal(t *testing.T) {
	store := notifytest.NewMemStore()
	store.Put("notify-slack", []byte("{not json"))
	core, logs := observer.New(zapcore.InfoLevel)
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{{Name: "slack", Notifier: &notifytest.Recorder{}}},
		Routes:       notify.DefaultRoutes(),
		Store:        store,
		Logger:       zap.New(core),
	}, time.Now())
	if err != nil {
		t.Fatalf("corrupt state must not be fatal: %v", err)
	}
	if len(d.OpenIncidents()) != 0 {
		t.Error("incidents from corrupt state")
	}
	if logs.FilterMessageSnippet("unreadable").Len() != 1 {
		t.Errorf("corrupt state not reported: %v", logs.All())
	}
}

// A failing store slows nothing down: delivery goes on from memory. The
// writer counts and logs its failed writes and retries them; the queue's
// saves made while its document cannot be written are counted, and logged
// once.
func TestSaveFailureIsCountedAndLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		r := newRig(t, store, &notifytest.Recorder{}, &notifytest.Recorder{})
		store.SetSaveError(errors.New("disk full"))
		r.start(t)
		ev := at(notifytest.PreemptStorm(time.Now()), time.Now())
		r.d.Send(ev)
		// A batch may have begun before the pagerduty document was saved;
		// the retry a second later has tried it.
		advance(time.Second)
		if got := counter(t, r.reg, "watchdog_state_write_failures_total", "document", "notify-pagerduty"); got < 1 {
			t.Errorf("write failures of notify-pagerduty = %v, want at least 1", got)
		}
		// The saves that follow find the document failing.
		for range 2 {
			ev = notifytest.Update(ev, time.Now(), detect.Critical)
			r.d.Send(ev)
			synctest.Wait()
		}
		if got := counter(t, r.reg, "watchdog_notification_state_save_failures_total", "integration", "pagerduty"); got < 2 {
			t.Errorf("save failures = %v, want every save while the document is not written counted", got)
		}
		if n := r.logs.FilterMessageSnippet("cannot persist").FilterField(zap.String("integration", "pagerduty")).Len(); n != 1 {
			t.Errorf("save failure logged %d times for pagerduty, want once", n)
		}
		if n := r.logs.FilterMessageSnippet("writing a state document failed").FilterField(zap.String("document", "notify-pagerduty")).Len(); n != 1 {
			t.Errorf("write failure logged %d times for notify-pagerduty, want once", n)
		}
		if got := kinds(r.pd.Delivered()); !strings.HasPrefix(got, "5f1c/trigger") {
			t.Errorf("delivery must go on without persistence, got %q", got)
		}
		r.stop()
	})
}

func TestMetricsLintAndPrecreatedLabels(t *testing.T) {
	r := newRig(t, notifytest.NewMemStore(), &notifytest.Recorder{}, &notifytest.Recorder{})
	problems, err := testutil.GatherAndLint(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	for _, in := range []string{"log", "pagerduty", "slack"} {
		if got := counter(t, r.reg, "watchdog_notification_failures_total", "integration", in, "reason", "rate_limited"); got != 0 {
			t.Errorf("%s: %v", in, got)
		}
		counter(t, r.reg, "watchdog_notification_oldest_undelivered_age_seconds", "integration", in)
		counter(t, r.reg, "watchdog_notification_queue_length", "integration", in)
		counter(t, r.reg, "watchdog_notification_delivery_latency_seconds", "integration", in)
		counter(t, r.reg, "watchdog_notifications_total", "integration", in, "result", "delivered")
	}
}

func TestOldestUndeliveredAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pd := &notifytest.Recorder{Fail: func(notify.Event, int) error { return errors.New("down") }}
		r := newRig(t, notifytest.NewMemStore(), pd, &notifytest.Recorder{})
		r.start(t)
		r.d.Send(at(notifytest.PreemptStorm(time.Now()), time.Now()))
		advance(42 * time.Second)
		if got := counter(t, r.reg, "watchdog_notification_oldest_undelivered_age_seconds", "integration", "pagerduty"); got != 42 {
			t.Errorf("oldest age = %v, want 42", got)
		}
		if got := counter(t, r.reg, "watchdog_notification_queue_length", "integration", "pagerduty"); got != 1 {
			t.Errorf("queue length = %v, want 1", got)
		}
		if got := counter(t, r.reg, "watchdog_notification_oldest_undelivered_age_seconds", "integration", "slack"); got != 0 {
			t.Errorf("slack oldest age = %v, want 0", got)
		}
		r.stop()
	})
}

func TestNewDispatcherRejectsBadConfig(t *testing.T) {
	_, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{
			{Name: "slack", Notifier: &notifytest.Recorder{}},
			{Name: "slack", Notifier: &notifytest.Recorder{}},
			{Name: "Bad Name", Notifier: &notifytest.Recorder{}},
			{Name: "pd", Notifier: &notifytest.Recorder{}, Options: notify.QueueOptions{MaxBackoff: -1}},
		},
	}, time.Now())
	if err == nil {
		t.Fatal("want error")
	}
	for _, want := range []string{"twice", "Bad Name", "max_backoff"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
