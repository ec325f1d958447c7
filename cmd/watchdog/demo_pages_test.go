package main

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/sglang-watchdog/sglang-watchdog/internal/runbook"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagelint"
)

// Every page the demo sends — each incident's trigger, updates and resolve,
// as the recording integrations received them — passes the page linter.
func TestDemoPagesPassTheLinter(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		run := runDemoInBubble(t)
		if len(run.events) == 0 {
			t.Fatal("the demo sent nothing")
		}
		byIncident := map[string][]notify.Event{}
		var order []string
		sent := map[string]bool{}
		for _, r := range run.events {
			key := fmt.Sprintf("%s/%d", r.ev.Fingerprint, r.ev.Seq)
			if sent[key] {
				continue // one event to several integrations
			}
			sent[key] = true
			if _, ok := byIncident[r.ev.Fingerprint]; !ok {
				order = append(order, r.ev.Fingerprint)
			}
			byIncident[r.ev.Fingerprint] = append(byIncident[r.ev.Fingerprint], r.ev)
		}
		pages, routerJoined := 0, false
		for _, fp := range order {
			evs := byIncident[fp]
			pages += len(evs)
			if evs[0].Replica == "router" {
				t.Errorf("the router paged on its own (%s): its failures come from a worker with its own incident", evs[0].Class)
			}
			if evs[0].Class == "replica_down" && strings.Contains(evs[0].Diagnosis, "The gateway router sees this worker as") &&
				strings.Contains(evs[0].Diagnosis, "took it out of rotation") {
				routerJoined = true
			}
			for _, p := range pagelint.CheckIncident(evs, pagelint.Options{Flag: runbook.KnownFlag}) {
				t.Errorf("%s on %s: %s", evs[0].Class, evs[0].Replica, p)
			}
		}
		if !routerJoined {
			t.Error("sim-0's crash page does not say the router took it out of rotation")
		}
		t.Logf("%d pages of %d incidents checked", pages, len(order))
	})
}
