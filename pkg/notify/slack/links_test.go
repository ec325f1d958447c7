package slack

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Every page names its runbook and its alert: as links when their URLs are
// absolute, as paths on the watchdog when no base URL is known; a URL of
// any other scheme is never rendered.
func TestPageCarriesRunbookAndAlertLinks(t *testing.T) {
	ev := notify.Event{Fingerprint: "fp1", Seq: 1, Kind: notify.KindTrigger, Status: notify.StatusFiring,
		Class: "preempt_storm", Severity: detect.Critical, Replica: "r0", Summary: "storm"}
	for _, tc := range []struct {
		name, runbook, alert string
		want, never          []string
	}{
		{"absolute", "https://wd.example/runbooks/preempt_storm", "https://wd.example/api/v1/alerts?fingerprint=fp1",
			[]string{"<https://wd.example/runbooks/preempt_storm|Runbook>", "<https://wd.example/api/v1/alerts?fingerprint=fp1|Incident>"}, nil},
		{"paths on the watchdog", "/runbooks/preempt_storm", "/api/v1/alerts?fingerprint=fp1",
			[]string{"Runbook: `/runbooks/preempt_storm` on the watchdog", "Incident: `/api/v1/alerts?fingerprint=fp1` on the watchdog"}, nil},
		{"other schemes", "javascript:alert(1)", "//evil.example/x", nil, []string{"javascript", "evil.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := ev
			ev.RunbookURL, ev.AlertURL = tc.runbook, tc.alert
			var text strings.Builder
			for _, b := range Blocks(ev) {
				raw, err := json.Marshal(b)
				if err != nil {
					t.Fatal(err)
				}
				var v any
				json.Unmarshal(raw, &v)
				collectText(v, &text)
			}
			for _, w := range tc.want {
				if !strings.Contains(text.String(), w) {
					t.Errorf("page lacks %q:\n%s", w, text.String())
				}
			}
			for _, n := range tc.never {
				if strings.Contains(text.String(), n) {
					t.Errorf("page renders %q:\n%s", n, text.String())
				}
			}
		})
	}
}

// collectText appends every "text" string of decoded blocks.
func collectText(v any, out *strings.Builder) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "text" {
				out.WriteString(s + "\n")
				continue
			}
			collectText(e, out)
		}
	case []any:
		for _, e := range x {
			collectText(e, out)
		}
	}
}
