package detect_test

import (
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// checkEvidenceLimits: in a class's firing scenario, the finding's numeric
// rule carries its number (Limit), and each evidence with a limit is on
// the side of it its Threshold names: the threshold line a plot draws is
// the one the detector crossed.
func checkEvidenceLimits(t *testing.T, c pageCase, round assess.Round) {
	t.Helper()
	class := c.class
	var found []detect.Finding
	for _, r := range round.Replicas {
		for _, f := range r.Findings {
			if f.Class == class {
				found = append(found, f)
			}
		}
	}
	if len(found) == 0 {
		t.Fatalf("the %s scenario finds no %s", class, class)
	}
	for _, f := range found {
		limits := 0
		for _, ev := range f.Evidence {
			if !ev.HasLimit {
				continue
			}
			limits++
			switch {
			case strings.HasPrefix(ev.Threshold, ">="):
				if ev.Value < ev.Limit {
					t.Errorf("%s: %s = %v is below its limit %v (%s)", class, ev.Name, ev.Value, ev.Limit, ev.Threshold)
				}
			case strings.HasPrefix(ev.Threshold, "<="):
				if ev.Value > ev.Limit {
					t.Errorf("%s: %s = %v is above its limit %v (%s)", class, ev.Name, ev.Value, ev.Limit, ev.Threshold)
				}
			default:
				t.Errorf("%s: %s has a limit but its threshold %q names no direction", class, ev.Name, ev.Threshold)
			}
		}
		if exempt := c.noSingleLimit != ""; limits == 0 && !exempt {
			t.Errorf("%s fires with no evidence carrying its rule's number: %+v", class, f.Evidence)
		} else if exempt && limits > 0 {
			t.Errorf("%s is said to have no single limit (%s) but carries %d", class, c.noSingleLimit, limits)
		}
	}
}
