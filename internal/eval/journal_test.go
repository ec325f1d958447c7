package eval

import (
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// journalSpy records what the loop tells the journal, and how many events
// the notifier had been handed by then.
type journalSpy struct {
	sent   *recorder
	rounds []journalRound
}

type journalRound struct {
	at          time.Time
	alerts      []alert.Incident
	changes     []alert.Transition
	events      []notify.Event
	sentAlready int
}

func (j *journalSpy) Observe(round assess.Round, alerts []alert.Incident, changes []alert.Transition, events []notify.Event, now time.Time) {
	j.rounds = append(j.rounds, journalRound{at: now, alerts: alerts, changes: changes, events: events, sentAlready: len(j.sent.events)})
}

// The journal sees every round and every retirement with the alerts after
// it and its events, before the notifier gets them: a delivery attempt
// always finds its incident's record.
func TestJournalSeesEachRoundBeforeItsEventsAreSent(t *testing.T) {
	storm := &detectorFunc{class: detect.PreemptStorm, on: map[string]bool{"r1": true}}
	l, rec, _ := newLoop(t, []detect.Detector{storm}, []detect.Replica{{Name: "r1", Model: "m"}}, nil)
	spy := &journalSpy{sent: rec}
	l.opts.Journal = spy
	t0 := time.Unix(1000, 0)
	l.Evaluate(t0)
	l.Retire(func(r string) bool { return r == "r1" }, "target removed", t0.Add(time.Second))

	if len(spy.rounds) != 2 {
		t.Fatalf("journal told of %d rounds, want 2", len(spy.rounds))
	}
	first, retired := spy.rounds[0], spy.rounds[1]
	if len(first.events) != 1 || first.events[0].Kind != notify.KindTrigger || first.sentAlready != 0 ||
		len(first.alerts) != 1 || first.alerts[0].ID != first.events[0].Incident {
		t.Errorf("first round: %+v", first)
	}
	if len(retired.events) != 1 || retired.events[0].Kind != notify.KindResolve || retired.sentAlready != 1 ||
		len(retired.alerts) != 1 || retired.alerts[0].State != alert.StateResolved || !retired.at.Equal(t0.Add(time.Second)) {
		t.Errorf("retirement: %+v", retired)
	}
}
