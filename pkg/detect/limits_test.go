package detect_test

import (
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// noSingleLimit are the classes whose firing rule has no one number to
// draw: a restart within a look-back, a slowdown of the p99 or of the
// mean.
var noSingleLimit = map[detect.Class]string{
	detect.ReplicaRestarted: "a restart within the look-back",
	detect.DecodeSlowdown:   "the p99 or the mean against the baseline",
}

// In every class's firing scenario, the finding's numeric rule carries its
// number (Limit), and each evidence with a limit is on the side of it its
// Threshold names: the threshold line a plot draws is the one the
// detector crossed.
func TestEvidenceLimitsAreTheNumbersCrossed(t *testing.T) {
	scenarios := pageScenarios()
	for _, e := range detect.Registry() {
		class := e.Class()
		mk, ok := scenarios[class]
		if !ok {
			t.Errorf("no scenario for %s", class)
			continue
		}
		t.Run(string(class), func(t *testing.T) {
			round := assessScenario(t, mk())
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
				if why, exempt := noSingleLimit[class]; limits == 0 && !exempt {
					t.Errorf("%s fires with no evidence carrying its rule's number: %+v", class, f.Evidence)
				} else if exempt && limits > 0 {
					t.Errorf("%s is listed as having no single limit (%s) but carries %d", class, why, limits)
				}
			}
		})
	}
}
