package detect_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

var updatePages = flag.Bool("update-pages", false, "rewrite the page events in "+pageEventsDir)

// pageEventsDir is where the real path's events for the golden pages are
// kept; pkg/notify/golden renders them with every integration and checks
// the pages.
const pageEventsDir = "../notify/golden/testdata/events"

// pageCase is a class's golden page: one representative incident, declared
// in the detector's own test file (TestGoldenPageEvents<Name>) and run by
// checkPage.
type pageCase struct {
	class    detect.Class
	scenario *scenario
	// noSingleLimit says why the class's firing rule has no one number to
	// draw (a restart within a look-back, a p99 or a mean against a
	// baseline); empty when it has one.
	noSingleLimit string
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

// Every class of the registry has its golden page events, and every
// events file is a class's. Each class's own test (checkPage) writes and
// checks its file.
func TestGoldenPageEvents(t *testing.T) {
	if *updatePages {
		t.Skip("-update-pages: the classes' own tests write their files; run again without it to check that every class has one")
	}
	files, err := filepath.Glob(filepath.Join(pageEventsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	have := map[detect.Class]bool{}
	for _, f := range files {
		have[detect.Class(strings.TrimSuffix(filepath.Base(f), ".json"))] = true
	}
	for _, e := range detect.Registry() {
		if !have[e.Class()] {
			t.Errorf("no golden page events for %s: add a TestGoldenPageEvents test with its scenario to its test file, then run go test ./pkg/detect -run TestGoldenPageEvents -update-pages", e.Class())
		}
		delete(have, e.Class())
	}
	for c := range have {
		t.Errorf("%s/%s.json: %s is no detector's class", pageEventsDir, c, c)
	}
}

// checkPage runs c's scenario through the real path and checks what it
// pages with: its evidence carries the numbers its rule crossed, and its
// trigger and resolve are the golden ones. The path is the class's
// scenario window, the detectors, the assessment (snapshot, triage,
// correlation) and the alert tracker; then a round on the same replica
// healthy again resolves it. The pages themselves are rendered and checked
// in pkg/notify/golden.
func checkPage(t *testing.T, c pageCase) {
	t.Helper()
	class, s := c.class, c.scenario
	round := assessScenario(t, s)
	checkEvidenceLimits(t, c, round)

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
}
