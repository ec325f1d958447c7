package pagerduty

import (
	"encoding/json"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Every event names its runbook and its alert: as links (and the alert as
// client_url) when their URLs are absolute, in the custom details as paths
// on the watchdog when no base URL is known.
func TestEventCarriesRunbookAndAlertLinks(t *testing.T) {
	ev := notify.Event{Fingerprint: "fp1", Seq: 1, Kind: notify.KindTrigger, Status: notify.StatusFiring,
		Class: "preempt_storm", Severity: detect.Critical, Replica: "r0", Summary: "storm"}

	abs := ev
	abs.RunbookURL, abs.AlertURL = "https://wd.example/runbooks/preempt_storm", "https://wd.example/api/v1/alerts?fingerprint=fp1"
	e := BuildEvent(abs, "key")
	hrefs := map[string]bool{}
	for _, l := range e.Links {
		hrefs[l.(map[string]string)["href"]] = true
	}
	if !hrefs[abs.RunbookURL] || !hrefs[abs.AlertURL] || e.ClientURL != abs.AlertURL {
		t.Errorf("links %v, client_url %q", e.Links, e.ClientURL)
	}

	rel := ev
	rel.RunbookURL, rel.AlertURL = "/runbooks/preempt_storm", "/api/v1/alerts?fingerprint=fp1"
	e = BuildEvent(rel, "key")
	raw, err := json.Marshal(e.Payload.Details)
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ Runbook, Alert string }
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if d.Runbook != rel.RunbookURL || d.Alert != rel.AlertURL || len(e.Links) != 0 || e.ClientURL != "" {
		t.Errorf("details %s, links %v, client_url %q: want the paths in the details and no links", raw, e.Links, e.ClientURL)
	}
}
