package notify_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// Every delivery attempt reaches OnAttempt with its number and, when it
// failed, its reason only: the error's text (here quoting a webhook URL)
// never does.
func TestOnAttemptReportsEachAttemptWithItsReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tries := 0 // of the incident's trigger; the delivery-failure notice also reaches slack
		slack := &notifytest.Recorder{Fail: func(ev notify.Event, _ int) error {
			if ev.Incident == "" {
				return nil
			}
			if tries++; tries <= 2 {
				return notify.WithReason(errors.New("POST https://hooks.slack.com/services/T0/B0/SECRET: 503"), notify.ReasonServerError)
			}
			return nil
		}}
		pd := &notifytest.Recorder{Fail: func(notify.Event, int) error { return errBadKey }}
		var mu sync.Mutex
		var got []notify.Attempt
		d, err := notify.NewDispatcher(notify.DispatcherConfig{
			Integrations: []notify.Integration{{Name: "pagerduty", Notifier: pd, Options: testOpts}, {Name: "slack", Notifier: slack, Options: testOpts}},
			Routes:       notify.DefaultRoutes(),
			Store:        notifytest.NewMemStore(),
			Logger:       zap.NewNop(),
			Registerer:   prometheus.NewRegistry(),
			OnAttempt: func(a notify.Attempt) {
				mu.Lock()
				got = append(got, a)
				mu.Unlock()
			},
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { d.Run(ctx); close(done) }()
		ev := incident("aaaa0001", "llama-70b-0", time.Now())
		ev.Incident = "aaaa0001-1"
		d.Send(ev)
		advance(10 * time.Minute)
		cancel()
		<-done
		mu.Lock()
		var slackAttempts []string
		var pdAttempts []notify.Attempt
		for _, a := range got {
			if strings.Contains(a.Event.Summary, "SECRET") || strings.Contains(string(a.Reason), "SECRET") {
				t.Errorf("an attempt carries the error text: %+v", a)
			}
			switch {
			case a.Integration == "slack" && a.Event.Incident == "aaaa0001-1":
				label := string(a.Reason)
				if a.Delivered {
					label = "ok"
				}
				slackAttempts = append(slackAttempts, fmt.Sprintf("%s #%d", label, a.Number))
			case a.Integration == "pagerduty":
				pdAttempts = append(pdAttempts, a)
			}
		}
		mu.Unlock()
		if want := []string{"server_error #1", "server_error #2", "ok #3"}; !slices.Equal(slackAttempts, want) {
			t.Errorf("slack attempts %v, want %v", slackAttempts, want)
		}
		if len(pdAttempts) != 1 || pdAttempts[0].Reason != notify.ReasonAuthError || !pdAttempts[0].GaveUp || pdAttempts[0].Delivered {
			t.Errorf("pagerduty attempts %+v, want one auth_error it gave up on", pdAttempts)
		}
	})
}
