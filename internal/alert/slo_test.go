package alert

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// burnRound is a round of findings with model m's SLO burning.
func burnRound(now time.Time, findings ...detect.Finding) assess.Round {
	r := roundOf(now, findings...)
	b := detect.Finding{Class: correlate.SLOBurn, Severity: detect.Critical, Replica: correlate.FleetReplica("m"), Model: "m", Summary: "SLO burning"}
	r.Groups = correlate.FileBurns(r.Groups, []correlate.Burn{{Finding: b, Headline: "burning the SLO"}})
	return r
}

// A burn paged on its own is renamed after the cause found later on a
// replica of its model (an update, not a second page) and moves to that
// replica, so the page names where to act; it drains in the cause's
// incident when it outlasts it.
func TestBurnAloneIsRenamedAfterItsCauseAndDrainsInIt(t *testing.T) {
	p := newPager(testConfig(), Links{})
	var evs []notify.Event
	at := t0
	for range 5 { // the burn alone: fires after 30 s
		evs = append(evs, p.Update(burnRound(at))...)
		at = at.Add(10 * time.Second)
	}
	for range 5 { // a storm on r1 explains it
		evs = append(evs, p.Update(burnRound(at, finding("r1", detect.PreemptStorm, detect.Critical)))...)
		at = at.Add(10 * time.Second)
	}
	for range 20 { // the storm clears, the burn goes on
		evs = append(evs, p.Update(burnRound(at))...)
		at = at.Add(10 * time.Second)
	}
	var triggers []string
	fps := map[string]bool{}
	for _, ev := range evs {
		fps[ev.Fingerprint] = true
		if ev.Kind == notify.KindTrigger {
			triggers = append(triggers, ev.Class)
		}
	}
	if !slices.Equal(triggers, []string{string(correlate.SLOBurn)}) || len(fps) != 1 {
		t.Fatalf("events %v: want one incident, triggered by the burn", kinds(evs))
	}
	renamed := slices.ContainsFunc(evs, func(ev notify.Event) bool {
		return ev.Kind == notify.KindUpdate && ev.Class == string(detect.PreemptStorm)
	})
	if !renamed {
		t.Errorf("events %v: the storm did not rename the burn's incident", kinds(evs))
	}
	for _, ev := range evs {
		if ev.Class == string(detect.PreemptStorm) && (ev.Replica != "r1" || !strings.HasPrefix(ev.Headline, "r1: ")) {
			t.Errorf("the storm's %s names replica %q (%q), want r1, where the storm is", ev.Kind, ev.Replica, ev.Headline)
		}
	}
	inc := p.Incidents()
	if len(inc) != 1 || inc[0].Class != detect.PreemptStorm || !inc[0].Open() || inc[0].Replica != "r1" {
		t.Errorf("incidents %+v: want the storm's on r1, open while the burn lasts", inc)
	}
}
