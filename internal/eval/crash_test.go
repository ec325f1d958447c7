package eval_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// The crash guarantee of package persist, through the real evaluation
// loop, alert tracker, dispatcher and writer: an event enqueued but not yet
// written is lost only together with the alert state of its round, so the
// restarted daemon pages late rather than never.

func crashConfig() alert.Config {
	cfg := alert.DefaultConfig()
	cfg.For, cfg.KeepFiringFor, cfg.RestoreGrace = 30*time.Second, time.Minute, time.Minute
	return cfg
}

func savedAlerts(t *testing.T, d disk) []alert.Incident {
	t.Helper()
	var saved []alert.Incident
	if raw := d.Raw(eval.AlertsDocument); len(raw) > 0 {
		if err := json.Unmarshal(raw, &saved); err != nil {
			t.Fatal(err)
		}
	}
	return saved
}

func kindsOf(evs []notify.Event) []notify.Kind {
	var out []notify.Kind
	for _, ev := range evs {
		out = append(out, ev.Kind)
	}
	return out
}

// The trigger is enqueued, then the process dies with the store stalled:
// neither the outbox nor the alert state of that round is on disk. The
// restarted tracker does not believe it paged; the condition is still
// there, so it fires again after the pending period and PagerDuty gets the
// trigger.
func TestCrashBeforeTheWriteLosesTheTriggerWithItsAlertState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := disk{notifytest.NewMemStore()}
		det := &scripted{}
		det.set(storm(detect.Critical))
		p1 := d.process()
		p1.stall()
		dm1 := start(t, p1, det, &notifytest.Recorder{}, crashConfig(), time.Second)
		dm1.run(dm1.writer.Run) // its dispatcher is not run: the process dies before the attempt
		dm1.loop.Evaluate(time.Now())
		time.Sleep(30 * time.Second)
		if evs := dm1.loop.Evaluate(time.Now()); !slices.Equal(kindsOf(evs), []notify.Kind{notify.KindTrigger}) {
			t.Fatalf("first incarnation sent %v, want the trigger", kindsOf(evs))
		}
		synctest.Wait()
		p1.die()
		dm1.shutdown()
		if names := d.Names(); len(names) != 0 {
			t.Fatalf("on disk after the crash: %v; the test means nothing of the round to have landed", names)
		}

		pd := &notifytest.Recorder{}
		dm2 := start(t, d.process(), det, pd, crashConfig(), time.Second)
		dm2.run(dm2.writer.Run)
		dm2.run(dm2.d.Run)
		if a := dm2.tracker.Incidents(); len(a) != 0 {
			t.Fatalf("the restarted tracker holds %+v: it would believe it paged", a)
		}
		if evs := dm2.loop.Evaluate(time.Now()); len(evs) != 0 {
			t.Fatalf("paged %v before the pending period", kindsOf(evs))
		}
		time.Sleep(30 * time.Second)
		dm2.loop.Evaluate(time.Now())
		synctest.Wait()
		if got := kindsOf(pd.Delivered()); !slices.Equal(got, []notify.Kind{notify.KindTrigger}) {
			t.Errorf("pagerduty got %v after the restart, want the trigger: late, not lost", got)
		}
		if saved := savedAlerts(t, d); len(saved) != 1 || saved[0].State != alert.StateFiring {
			t.Errorf("alert state on disk %+v, want the firing alert", saved)
		}
		dm2.shutdown()
	})
}

// The incident ends, its resolve is enqueued but neither delivered (the
// provider is down) nor written (the store stalls), and the process dies.
// The alert state on disk still holds the alert firing: restored, it
// resolves after restore_grace and the resolve reaches PagerDuty.
func TestCrashBeforeTheWriteLosesTheResolveWithItsAlertState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := disk{notifytest.NewMemStore()}
		det := &scripted{}
		det.set(storm(detect.Critical))
		cfg := crashConfig()
		cfg.For = 0
		pd1 := &notifytest.Recorder{Fail: func(ev notify.Event, _ int) error {
			if ev.Kind == notify.KindResolve {
				return notify.WithReason(errors.New("pagerduty: 503"), notify.ReasonServerError)
			}
			return nil
		}}
		p1 := d.process()
		dm1 := start(t, p1, det, pd1, cfg, time.Second)
		dm1.run(dm1.writer.Run)
		dm1.run(dm1.d.Run)
		dm1.loop.Evaluate(time.Now())
		synctest.Wait()
		if got := kindsOf(pd1.Delivered()); !slices.Equal(got, []notify.Kind{notify.KindTrigger}) {
			t.Fatalf("pagerduty got %v, want the trigger", got)
		}

		det.set(nil)
		p1.stall()
		time.Sleep(time.Minute) // keep_firing_for
		if evs := dm1.loop.Evaluate(time.Now()); !slices.Equal(kindsOf(evs), []notify.Kind{notify.KindResolve}) {
			t.Fatalf("first incarnation sent %v, want the resolve", kindsOf(evs))
		}
		synctest.Wait()
		p1.die()
		dm1.shutdown()
		if saved := savedAlerts(t, d); len(saved) != 1 || saved[0].State != alert.StateFiring {
			t.Fatalf("alert state on disk %+v, want the alert still firing: the resolve's round must not have landed", saved)
		}

		pd2 := &notifytest.Recorder{}
		dm2 := start(t, d.process(), det, pd2, cfg, time.Second)
		dm2.run(dm2.writer.Run)
		dm2.run(dm2.d.Run)
		if evs := dm2.loop.Evaluate(time.Now()); len(evs) != 0 {
			t.Fatalf("sent %v within restore_grace", kindsOf(evs))
		}
		time.Sleep(cfg.RestoreGrace)
		dm2.loop.Evaluate(time.Now())
		synctest.Wait()
		if got := kindsOf(pd2.Delivered()); !slices.Equal(got, []notify.Kind{notify.KindResolve}) {
			t.Errorf("pagerduty got %v after the restart, want the resolve: late, not lost", got)
		}
		dm2.shutdown()
	})
}

// A failing outbox write holds back the alert state of its round: on disk
// the alert state is never ahead of the PagerDuty outbox, and once the
// outbox is written the alert state follows it.
func TestFailingOutboxWriteHoldsBackTheAlertState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := disk{notifytest.NewMemStore()}
		det := &scripted{}
		det.set(storm(detect.Critical))
		cfg := crashConfig()
		cfg.For = 0
		p := d.process()
		p.failWrites("notify-pagerduty", errors.New(`configmaps "sglang-watchdog-state" is forbidden`))
		pd := &notifytest.Recorder{}
		dm := start(t, p, det, pd, cfg, time.Second)
		dm.run(dm.writer.Run)
		dm.run(dm.d.Run)
		dm.loop.Evaluate(time.Now())
		synctest.Wait()
		if got := kindsOf(pd.Delivered()); !slices.Equal(got, []notify.Kind{notify.KindTrigger}) {
			t.Fatalf("pagerduty got %v, want the trigger: delivery does not wait for the store", got)
		}
		time.Sleep(10 * time.Second) // retries keep failing
		synctest.Wait()
		if saved := savedAlerts(t, d); len(saved) != 0 {
			t.Fatalf("alert state written (%d alerts) while the outbox holding its trigger is not", len(saved))
		}

		p.failWrites("notify-pagerduty", nil)
		time.Sleep(time.Minute)
		synctest.Wait()
		written := p.writes()
		i, j := slices.Index(written, "notify-pagerduty"), slices.Index(written, eval.AlertsDocument)
		if i < 0 || j < i {
			t.Errorf("writes %v: want the outbox, then the alert state", written)
		}
		if saved := savedAlerts(t, d); len(saved) != 1 {
			t.Errorf("alert state on disk %+v after the outbox was written", saved)
		}
		dm.shutdown()
	})
}
