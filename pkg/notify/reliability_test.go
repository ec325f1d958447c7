package notify_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"

	"go.uber.org/zap/zapcore"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// notices are the delivery-failure notices among evs.
func notices(evs []notify.Event) []notify.Event {
	var out []notify.Event
	for _, ev := range evs {
		if ev.Class == notify.ClassDeliveryFailure {
			out = append(out, ev)
		}
	}
	return out
}

// persisted decodes the incident records of one integration's document.
func persisted(t *testing.T, store *notifytest.MemStore, integration string) (records map[string]notify.Incident, outbox int) {
	t.Helper()
	var doc struct {
		Outbox    []json.RawMessage          `json:"outbox"`
		Incidents map[string]notify.Incident `json:"incidents"`
	}
	if err := json.Unmarshal(store.Raw("notify-"+integration), &doc); err != nil {
		t.Fatalf("notify-%s: %v", integration, err)
	}
	return doc.Incidents, len(doc.Outbox)
}

func openNoticeRecords(t *testing.T, store *notifytest.MemStore, integration string) int {
	t.Helper()
	recs, _ := persisted(t, store, integration)
	n := 0
	for _, inc := range recs {
		if inc.Last.Class == notify.ClassDeliveryFailure {
			n++
		}
	}
	return n
}

// incident is a sample critical incident with its own fingerprint.
func incident(fp, replica string, now time.Time) notify.Event {
	ev := at(notifytest.PreemptStorm(now), now)
	ev.Fingerprint, ev.Replica = fp, replica
	return ev
}

var errBadKey = notify.WithReason(notify.Permanent(errors.New("pagerduty: 400 invalid routing key")), notify.ReasonAuthError)

// brokenUntilFixed fails every attempt permanently while broken is set.
func brokenUntilFixed(broken *atomic.Bool) *notifytest.Recorder {
	return &notifytest.Recorder{Fail: func(notify.Event, int) error {
		if broken.Load() {
			return errBadKey
		}
		return nil
	}}
}

// The notice about a failing integration is resolved, in the integrations
// that got it, by that integration's next successful delivery, and its
// records are gone afterwards.
func TestDeliveryFailureNoticeResolvesWhenTheIntegrationDeliversAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var broken atomic.Bool
		broken.Store(true)
		pd, sl := brokenUntilFixed(&broken), &notifytest.Recorder{}
		store := notifytest.NewMemStore()
		r := newRig(t, store, pd, sl)
		r.start(t)
		r.d.Send(incident("aaaa0001", "llama-70b-0", time.Now()))
		synctest.Wait()
		got := notices(sl.Delivered())
		if len(got) != 1 || got[0].Kind != notify.KindTrigger || got[0].Integration != "pagerduty" || !strings.Contains(got[0].Summary, "aaaa0001") {
			t.Fatalf("slack notices %+v, want one trigger about pagerduty naming incident aaaa0001", got)
		}
		if n := openNoticeRecords(t, store, "slack"); n != 1 {
			t.Fatalf("slack notice records = %d, want 1 open", n)
		}

		advance(10 * time.Minute)
		broken.Store(false) // the routing key is fixed
		r.d.Send(incident("bbbb0002", "llama-70b-1", time.Now()))
		synctest.Wait()
		if got := kinds(pd.Delivered()); got != "bbbb/trigger" {
			t.Fatalf("pagerduty delivered %q", got)
		}
		got = notices(sl.Delivered())
		if len(got) != 2 || got[1].Kind != notify.KindResolve || got[1].Fingerprint != got[0].Fingerprint {
			t.Fatalf("slack notices %q, want the notice's trigger then its resolve", kinds(got))
		}
		if !strings.Contains(got[1].Summary, "pagerduty delivers again") || !strings.Contains(got[1].Summary, "nothing about the incident itself") {
			t.Errorf("resolve does not say the integration recovered and the incident is not resolved by it: %q", got[1].Summary)
		}
		if !strings.Contains(r.logOut.String(), "pagerduty delivers again") {
			t.Error("the log integration did not get the notice's resolve")
		}
		for _, in := range []string{"slack", "log"} {
			if n := openNoticeRecords(t, store, in); n != 0 {
				t.Errorf("%s keeps %d notice records after the resolve", in, n)
			}
		}
		// The next delivery resolves nothing more.
		r.d.Send(incident("cccc0003", "llama-70b-2", time.Now()))
		synctest.Wait()
		if n := len(notices(sl.Delivered())); n != 2 {
			t.Errorf("slack notices = %d after another delivery, want still 2", n)
		}
		r.stop()
	})
}

// Open notices survive a restart and are resolved by the first delivery
// after it.
func TestOpenNoticeIsResolvedAfterRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var broken atomic.Bool
		broken.Store(true)
		pd, sl := brokenUntilFixed(&broken), &notifytest.Recorder{}
		store := notifytest.NewMemStore()
		r := newRig(t, store, pd, sl)
		r.start(t)
		r.d.Send(incident("aaaa0001", "llama-70b-0", time.Now()))
		synctest.Wait()
		r.stop()

		broken.Store(false)
		r2 := newRig(t, store, pd, sl)
		r2.start(t)
		advance(time.Minute)
		r2.d.Send(incident("bbbb0002", "llama-70b-1", time.Now()))
		synctest.Wait()
		got := notices(sl.Delivered())
		if len(got) != 2 || got[1].Kind != notify.KindResolve {
			t.Fatalf("slack notices %q, want trigger then resolve across the restart", kinds(got))
		}
		if n := openNoticeRecords(t, store, "slack"); n != 0 {
			t.Errorf("slack keeps %d notice records", n)
		}
		r2.stop()
	})
}

// A notice whose integration never delivers again expires after the notice
// retention: it is resolved, saying so, and its records are pruned.
func TestDeliveryFailureNoticeExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var broken atomic.Bool
		broken.Store(true)
		pd, sl := brokenUntilFixed(&broken), &notifytest.Recorder{}
		store := notifytest.NewMemStore()
		r := newRig(t, store, pd, sl)
		r.start(t)
		r.d.Send(incident("aaaa0001", "llama-70b-0", time.Now()))
		synctest.Wait()
		retention := notify.DefaultQueueOptions().NoticeRetention
		advance(retention - time.Minute)
		warn := at(notifytest.RetryAvalanche(time.Now()), time.Now()) // routed to Slack only
		r.d.Send(warn)
		synctest.Wait()
		if got := notices(sl.Delivered()); len(got) != 1 {
			t.Fatalf("notice resolved before its retention: %q", kinds(got))
		}
		advance(time.Minute)
		r.d.Send(notifytest.Resolve(warn, time.Now()))
		synctest.Wait()
		got := notices(sl.Delivered())
		if len(got) != 2 || got[1].Kind != notify.KindResolve || !strings.Contains(got[1].Summary, "expired") {
			t.Fatalf("slack notices %+v, want the notice resolved as expired", got)
		}
		if n := openNoticeRecords(t, store, "slack"); n != 0 {
			t.Errorf("slack keeps %d notice records after expiry", n)
		}
		if len(pd.Attempts()) != 1 {
			t.Errorf("pagerduty attempts = %d, want only the failed trigger", len(pd.Attempts()))
		}
		r.stop()
	})
}

// A resolve that cannot be delivered (permanent error, retry budget
// exhausted) is reported through the other integration by a notice that
// names the incident and says to close it by hand.
func TestLostResolveIsReportedThroughTheOtherIntegration(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"permanent error", errBadKey},
		{"retries exhausted", notify.WithReason(errors.New("pagerduty: 503"), notify.ReasonServerError)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pd := &notifytest.Recorder{Fail: func(ev notify.Event, _ int) error {
					if ev.Kind == notify.KindResolve {
						return tc.err
					}
					return nil
				}}
				sl := &notifytest.Recorder{}
				r := newRig(t, notifytest.NewMemStore(), pd, sl)
				r.start(t)
				storm := incident("aaaa0001", "llama-70b-0", time.Now())
				r.d.Send(storm)
				synctest.Wait()
				advance(time.Minute)
				r.d.Send(notifytest.Resolve(storm, time.Now()))
				advance(testOpts.MaxRetryDuration + testOpts.MaxBackoff)
				got := notices(sl.Delivered())
				if len(got) != 1 {
					t.Fatalf("slack notices %q, want one about the lost resolve", kinds(got))
				}
				n := got[0]
				for _, want := range []string{"RESOLVE", "preempt_storm", "llama-70b-0", storm.Fingerprint, "may still show it open"} {
					if !strings.Contains(n.Summary, want) {
						t.Errorf("notice summary lacks %q: %q", want, n.Summary)
					}
				}
				if len(n.Emergency) == 0 || !strings.Contains(n.Emergency[0], "by hand in pagerduty") {
					t.Errorf("first step does not say to resolve it by hand: %q", n.Emergency)
				}
				if got := counter(t, r.reg, "watchdog_notifications_total", "integration", "pagerduty", "result", "failed"); got != 1 {
					t.Errorf("failed = %v, want 1", got)
				}
				r.stop()
			})
		})
	}
}

// A full outbox drops the least important event and never a resolve for a
// trigger or an update: updates go first, then triggers, and a resolve is
// kept beyond the bound. Every drop is counted, logged and reported
// through the other integration.
func TestFullOutboxDropsLoudlyAndKeepsResolves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		small := testOpts
		small.MaxPending = 3
		pd, sl := &notifytest.Recorder{}, &notifytest.Recorder{}
		r := newCopyWith(t, notifytest.NewMemStore(), pd, sl, false, testOpts, small)
		now := time.Now()
		warn := func(fp string) notify.Event { // routed to Slack only
			ev := at(notifytest.RetryAvalanche(now), now)
			ev.Fingerprint = fp
			return ev
		}
		a, b, c, d := warn("aaaa"), warn("bbbb"), warn("cccc"), warn("dddd")
		slack := r.d.Queue("slack")
		steps := []struct {
			send        notify.Event
			wantPending string
		}{
			{a, "aaaa/trigger"},
			{b, "aaaa/trigger bbbb/trigger"},
			{notifytest.Update(a, now, detect.Warning), "aaaa/trigger bbbb/trigger aaaa/update"},
			{notifytest.Resolve(b, now), "aaaa/trigger bbbb/trigger bbbb/resolve"},              // the update goes
			{c, "bbbb/trigger bbbb/resolve cccc/trigger"},                                       // then the oldest trigger
			{notifytest.Resolve(a, now), "bbbb/resolve cccc/trigger aaaa/resolve"},              // a trigger for a resolve
			{notifytest.Resolve(c, now), "bbbb/resolve aaaa/resolve cccc/resolve"},              // likewise
			{d, "bbbb/resolve aaaa/resolve cccc/resolve"},                                       // a trigger never displaces a resolve
			{notifytest.Resolve(d, now), "bbbb/resolve aaaa/resolve cccc/resolve dddd/resolve"}, // resolves are kept beyond the bound
		}
		for i, s := range steps {
			r.d.Send(s.send)
			if got := kinds(slack.Pending()); got != s.wantPending {
				t.Fatalf("step %d (%s/%s): slack pending %q, want %q", i, s.send.Fingerprint, s.send.Kind, got, s.wantPending)
			}
		}
		const drops = 5 // update a, trigger a, trigger b, trigger c, trigger d
		if got := counter(t, r.reg, "watchdog_notifications_total", "integration", "slack", "result", "failed"); got != drops {
			t.Errorf("failed = %v, want %d", got, drops)
		}
		if got := counter(t, r.reg, "watchdog_notification_failures_total", "integration", "slack", "reason", "queue_full"); got != drops {
			t.Errorf("queue_full failures = %v, want %d", got, drops)
		}
		if n := r.logs.FilterLevelExact(zapcore.ErrorLevel).FilterMessageSnippet("NOTIFICATION LOST: dropped from a full outbox").Len(); n != drops {
			t.Errorf("loud log lines = %d, want %d", n, drops)
		}
		reported := notices(r.d.Queue("pagerduty").Pending())
		if len(reported) != drops {
			t.Fatalf("pagerduty got %d notices, want %d: %q", len(reported), drops, kinds(reported))
		}
		for _, n := range reported {
			if n.Integration != "slack" || !strings.Contains(n.Diagnosis, "queue_full") {
				t.Errorf("notice does not report a full slack outbox: %q / %q", n.Summary, n.Diagnosis)
			}
		}
		r.start(t)
		synctest.Wait()
		if got := kinds(sl.Delivered()); got != "bbbb/resolve aaaa/resolve cccc/resolve dddd/resolve" {
			t.Errorf("slack delivered %q", got)
		}
		// Slack delivering again closes the notices (one per incident).
		var opened, closed int
		for _, n := range notices(pd.Delivered()) {
			if n.Kind == notify.KindResolve {
				closed++
				if !strings.Contains(n.Summary, "slack delivers again") {
					t.Errorf("notice resolve %q", n.Summary)
				}
			} else {
				opened++
			}
		}
		if opened != drops || closed != 4 {
			t.Errorf("pagerduty delivered %d notices and %d resolves of them, want %d and 4 (aaaa lost two events)", opened, closed, drops)
		}
		r.stop()
	})
}

// A Retry-After longer than the cap waits the cap, and says so.
func TestRetryAfterIsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sl := &notifytest.Recorder{Fail: func(_ notify.Event, n int) error {
			if n == 0 {
				return notify.RetryAfter(errors.New("slack: rate limited"), 24*time.Hour)
			}
			return nil
		}}
		r := newRig(t, notifytest.NewMemStore(), &notifytest.Recorder{}, sl)
		r.start(t)
		r.d.Send(at(notifytest.RetryAvalanche(time.Now()), time.Now()))
		synctest.Wait()
		limit := notify.DefaultMaxRetryAfter
		advance(limit - time.Millisecond)
		if n := len(sl.Attempts()); n != 1 {
			t.Fatalf("attempts before the cap = %d, want 1", n)
		}
		advance(time.Millisecond)
		if got := kinds(sl.Delivered()); got != "9a4e/trigger" {
			t.Fatalf("delivered %q after the cap, want the trigger", got)
		}
		if n := r.logs.FilterMessageSnippet("longer than max_retry_after").Len(); n != 1 {
			t.Errorf("cap logged %d times, want once", n)
		}
		r.stop()
	})
}

// A Retry-After hold restored from the state is capped too.
func TestRestoredRetryAfterIsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := notifytest.NewMemStore()
		var limited atomic.Bool
		limited.Store(true)
		sl := &notifytest.Recorder{Fail: func(notify.Event, int) error {
			if limited.Load() {
				return notify.RetryAfter(errors.New("slack: rate limited"), 24*time.Hour)
			}
			return nil
		}}
		lax := testOpts
		lax.MaxRetryAfter = 48 * time.Hour
		r := newCopyWith(t, store, &notifytest.Recorder{}, sl, false, lax, lax)
		r.start(t)
		r.d.Send(at(notifytest.RetryAvalanche(time.Now()), time.Now()))
		synctest.Wait()
		if hold := time.Until(r.d.Queue("slack").HoldUntil()); hold != 24*time.Hour {
			t.Fatalf("hold %s, want the 24h asked (below this copy's cap)", hold)
		}
		r.stop()

		limited.Store(false)
		r2 := newRig(t, store, &notifytest.Recorder{}, sl)
		if hold := time.Until(r2.d.Queue("slack").HoldUntil()); hold != notify.DefaultMaxRetryAfter {
			t.Errorf("restored hold %s, want capped to %s", hold, notify.DefaultMaxRetryAfter)
		}
		if n := r2.logs.FilterMessageSnippet("restored Retry-After hold exceeds max_retry_after").Len(); n != 1 {
			t.Errorf("restored cap logged %d times, want once", n)
		}
		r2.start(t)
		advance(notify.DefaultMaxRetryAfter)
		if got := kinds(sl.Delivered()); got != "9a4e/trigger" {
			t.Errorf("delivered %q within the cap after restart", got)
		}
		r2.stop()
	})
}

func TestQueueOptionsRejectNegativeBounds(t *testing.T) {
	err := notify.QueueOptions{MaxRetryAfter: -time.Second, MaxRecords: -1, NoticeRetention: -time.Hour}.Validate()
	for _, want := range []string{"max_retry_after", "max_records", "notice_retention"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

// The persisted documents stay bounded however many incidents and
// delivery failures pass through: resolved records are slimmed and capped,
// notices are resolved and pruned. In HA every document shares one
// ConfigMap of at most 1 MiB.
func TestPersistedStateStaysBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			incidents  = 150
			maxRecords = 20
			maxPending = 20
			// An open record or a pending event carries a whole event
			// (under 3 KB for the sample pages), a resolved record a slim one.
			eventBytes = 3 << 10
			bound      = (maxRecords + maxPending + 4) * eventBytes
		)
		opts := testOpts
		opts.MaxRecords = maxRecords
		opts.MaxPending = maxPending
		store := notifytest.NewMemStore()
		var pdDown atomic.Bool
		pd := &notifytest.Recorder{Fail: func(notify.Event, int) error {
			if pdDown.Load() {
				return notify.WithReason(errors.New("pagerduty: connection refused"), notify.ReasonNetwork)
			}
			return nil
		}}
		// Slack fails permanently on every fifth attempt: each failure is a
		// notice in PagerDuty and the log, resolved by Slack's next delivery.
		sl := &notifytest.Recorder{Fail: func(_ notify.Event, n int) error {
			if n%5 == 4 {
				return errBadKey
			}
			return nil
		}}
		d, err := notify.NewDispatcher(notify.DispatcherConfig{
			Integrations: []notify.Integration{
				{Name: "log", Notifier: notify.NewLogNotifier(nil, nil), Options: opts},
				{Name: "pagerduty", Notifier: pd, Options: opts},
				{Name: "slack", Notifier: sl, Options: opts},
			},
			Routes: notify.DefaultRoutes(),
			Store:  store,
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		r := &rig{d: d}
		r.start(t)
		integrations := []string{"log", "pagerduty", "slack"}
		largest := map[string]int{}
		for i := range incidents {
			ev := incident(fmt.Sprintf("%016x", i), fmt.Sprintf("replica-%03d", i%50), time.Now())
			r.d.Send(ev)
			advance(time.Minute)
			r.d.Send(notifytest.Update(ev, time.Now(), detect.Critical))
			advance(time.Minute)
			r.d.Send(notifytest.Resolve(ev, time.Now()))
			advance(time.Minute)
			for _, in := range integrations {
				largest[in] = max(largest[in], len(store.Raw("notify-"+in)))
			}
		}
		// Then PagerDuty is unreachable while twice its outbox bound of
		// incidents fire: the outbox stays bounded too.
		pdDown.Store(true)
		for i := range 2 * maxPending {
			r.d.Send(incident(fmt.Sprintf("%016x", incidents+i), "replica-down", time.Now()))
			advance(time.Second)
			for _, in := range integrations {
				largest[in] = max(largest[in], len(store.Raw("notify-"+in)))
			}
		}
		if _, pending := persisted(t, store, "pagerduty"); pending != maxPending {
			t.Errorf("pagerduty outbox holds %d events, want the bound %d", pending, maxPending)
		}
		r.stop()
		if n := len(notices(pd.Delivered())); n < incidents/5 {
			t.Fatalf("only %d notices reached pagerduty; the test means to drive many", n)
		}
		for _, in := range integrations {
			if largest[in] > bound {
				t.Errorf("%s: the document reached %d bytes, above the bound %d for %d records", in, largest[in], bound, maxRecords)
			}
			recs, _ := persisted(t, store, in)
			if len(recs) > maxRecords {
				t.Errorf("%s: %d records, above max_records %d", in, len(recs), maxRecords)
			}
			var open, resolved, openBytes, resolvedBytes, noticeRecs int
			for _, inc := range recs {
				b, _ := json.Marshal(inc)
				if inc.Last.Class == notify.ClassDeliveryFailure {
					noticeRecs++
				}
				if inc.Open {
					open, openBytes = open+1, openBytes+len(b)
				} else {
					resolved, resolvedBytes = resolved+1, resolvedBytes+len(b)
				}
			}
			if noticeRecs > 1 {
				t.Errorf("%s keeps %d notice records; resolved notices must be pruned", in, noticeRecs)
			}
			raw := store.Raw("notify-" + in)
			_, pending := persisted(t, store, in)
			t.Logf("%s: %d bytes (%d gzipped) for %d records: %d open (%d B each), %d resolved (%d B each); %d pending; largest %d bytes",
				in, len(raw), gzipLen(raw), len(recs), open, openBytes/max(1, open), resolved, resolvedBytes/max(1, resolved), pending, largest[in])
		}
	})
}

func gzipLen(b []byte) int {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Len()
}

// The dispatcher's queue options reach every integration, the built-in log
// one included, where the integration's own options leave a field zero.
func TestDispatcherQueueOptionsReachEveryIntegration(t *testing.T) {
	own := testOpts
	own.MaxPending = 10
	d, err := notify.NewDispatcher(notify.DispatcherConfig{
		Integrations: []notify.Integration{
			{Name: "pagerduty", Notifier: &notifytest.Recorder{}, Options: own},
			{Name: "slack", Notifier: &notifytest.Recorder{}},
		},
		Routes: notify.DefaultRoutes(),
		Queue:  notify.QueueOptions{MaxPending: 2},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, fp := range []string{"aaaa", "bbbb", "cccc"} { // critical: pagerduty, slack and the log
		d.Send(incident(fp, "sgl-"+fp, now))
	}
	for name, want := range map[string]func(int) bool{
		"slack":     func(n int) bool { return n == 2 },
		"log":       func(n int) bool { return n == 2 },
		"pagerduty": func(n int) bool { return n >= 3 }, // its own bound
	} {
		if n := len(d.Queue(name).Pending()); !want(n) {
			t.Errorf("%s: %d pending after 3 triggers (dispatcher max_pending 2, pagerduty's own 10)", name, n)
		}
	}
}
