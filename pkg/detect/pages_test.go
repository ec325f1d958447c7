package detect_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

var updatePages = flag.Bool("update-pages", false, "rewrite the page events in "+pageEventsDir)

// pageEventsDir is where the real path's events for the golden pages are
// kept; pkg/notify/golden renders them with every integration and checks
// the pages.
const pageEventsDir = "../notify/golden/testdata/events"

// pageScenario is one representative incident per class, from this
// package's own scenario tests.
func pageScenarios() map[detect.Class]func() *scenario {
	return map[detect.Class]func() *scenario{
		"preempt_storm":   func() *scenario { return preemptStorm(2) },
		"cache_collapse":  runbookSnapshot,
		"retry_avalanche": retryAvalanche,
		"replica_down": func() *scenario {
			return failingFor(4, "refused", "dial tcp 10.0.0.7:30000: connect: connection refused")
		},
		"replica_restarted": func() *scenario {
			s := healthyEngine()
			s.restarts = []time.Duration{incident}
			return s
		},
		"kv_saturation": runawayDecode,
		"engine_hang":   func() *scenario { return ncclHang(incident) },
		"queue_latency": func() *scenario {
			return slowFirstToken(2.8, 2.3).with(gauge(series.NumQueueReqs, stepAt(incidentLong, 2, 60)))
		},
		"decode_slowdown": func() *scenario { return slowDecode(0.07) },
		"cold_start":      func() *scenario { return newReplica(4*time.Minute, 16*time.Minute) },
		"lora_thrash":     loraThrash,
		"pd_transfer_failure": func() *scenario {
			return pdDecode().with(counter(series.TransferFailedTotal, stepAt(incident, 0, 0.5)))
		},
		"metrics_blind": func() *scenario {
			s := failingFor(3, "http_status", "HTTP 404 Not Found")
			for i := range s.failures {
				s.failures[i].status = 404
			}
			return s
		},
		"error_rate": func() *scenario { return failing("503", 1.5) },
	}
}

// pageEvents is what a class's incident sends: its trigger, and its
// resolve once the replica is healthy again.
type pageEvents struct {
	Trigger notify.Event `json:"trigger"`
	Resolve notify.Event `json:"resolve"`
}

// assessScenario runs every enabled detector, the triage and the
// correlation on the scenario's window through the assessment core.
func assessScenario(t *testing.T, s *scenario) assess.Round {
	t.Helper()
	cfg := detect.DefaultConfig()
	store, now := s.run(t, cfg)
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := assess.New(ds, assess.Config{Triage: cfg.Triage, Correlation: correlate.DefaultConfig()})
	var round assess.Round
	if !store.View(s.target, func(w detect.Window) { round = a.AssessWindow(w, now) }) {
		t.Fatalf("replica %s not in the store", s.target)
	}
	return round
}

// The events every incident class pages with, produced by the real path:
// the class's scenario window, the detectors, the assessment (snapshot,
// triage, correlation) and the alert tracker; then a round on the same
// replica healthy again resolves it. The pages themselves are rendered and
// checked in pkg/notify/golden.
func TestGoldenPageEvents(t *testing.T) {
	scenarios := pageScenarios()
	for _, e := range detect.Registry() {
		class := e.Class()
		mk, ok := scenarios[class]
		if !ok {
			t.Errorf("no golden page scenario for %s: add one to pageScenarios", class)
			continue
		}
		t.Run(string(class), func(t *testing.T) {
			s := mk()
			round := assessScenario(t, s)
			tr := alert.NewTracker(alert.Config{ResolvedRetention: time.Hour})
			links := alert.Links{ExternalURL: "https://watchdog.example.internal:9464"}
			fired := links.Events(tr.Update(round), round)
			i := slices.IndexFunc(fired, func(ev notify.Event) bool { return ev.Class == string(class) })
			if i < 0 {
				var got []string
				for _, ev := range fired {
					got = append(got, ev.Class)
				}
				t.Fatalf("the %s scenario pages %v, not %s", class, got, class)
			}
			trig := fired[i]

			healthy := healthyEngine()
			healthy.target = s.target
			healthy.kind, healthy.model, healthy.engineType = s.kind, s.model, s.engineType
			recovered := assessScenario(t, healthy)
			recovered.At = round.At.Add(12*time.Minute + 30*time.Second)
			var res notify.Event
			for _, ev := range links.Events(tr.Update(recovered), recovered) {
				if ev.Fingerprint == trig.Fingerprint && ev.Kind == notify.KindResolve {
					res = ev
				}
			}
			if res.Kind != notify.KindResolve {
				t.Fatalf("%s did not resolve on a healthy round", class)
			}
			got, err := json.MarshalIndent(pageEvents{Trigger: trig, Resolve: res}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join(pageEventsDir, string(class)+".json")
			if *updatePages {
				if err := os.MkdirAll(pageEventsDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/detect -run TestGoldenPageEvents -update-pages)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from what the real path sends now (run go test ./pkg/detect -run TestGoldenPageEvents -update-pages, then review the pages in pkg/notify/golden):\n%s", path, got)
			}
		})
	}
}
