package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

var update = flag.Bool("update", false, "rewrite the golden postmortem in testdata")

// stormRun is a preempt storm on one replica played through the real
// daemon in a testing/synctest bubble, until it resolved: the journal's
// record and the postmortem draft as the API serves them.
type stormRun struct {
	record     incident.Record
	list       []incident.Summary
	markdown   string
	html       string
	openStatus int    // /postmortem.md while the incident was firing
	openBody   string // its message
}

// playPreemptStorm: 4 minutes healthy, then 3 retractions/s with the KV
// pool at 98%, a queue of 40 and latencies up for 90 s, then healthy
// again until well past the resolve.
func playPreemptStorm(t *testing.T) stormRun {
	t.Helper()
	var out stormRun
	keepSignalMachineryOutOfBubble(t)
	synctest.Test(t, func(t *testing.T) {
		engine := newFakeEngine("org/model", healthyLoad())
		run := startDaemon(t, fmt.Sprintf(flipConfig, "5s"), map[string]*fakeEngine{"r0": engine})
		s := &script{start: run.start, marks: map[time.Duration]string{}}
		storm := 4*time.Minute + 500*time.Millisecond
		s.at(storm, "r0: preempt storm", func() {
			engine.set(func(l *engineLoad) {
				l.RetractionsPerSecond, l.KVUsage, l.Queued, l.TTFT, l.ITL = 3, 0.98, 40, 3, 0.08
			})
		})
		s.at(storm+60*time.Second, "", nil)
		firing := getIncidents(t, run, "?state=firing")
		if len(firing) != 1 {
			t.Fatalf("one minute into the storm: firing incidents %+v, want one", firing)
		}
		out.openStatus, out.openBody = apiGet(t, run, "/incidents/"+firing[0].ID+"/postmortem.md")
		s.at(storm+90*time.Second, "r0: healthy again", func() { engine.set(func(l *engineLoad) { *l = healthyLoad() }) })
		s.at(storm+90*time.Second+resolveBound+5*time.Second, "", nil)
		out.list = getIncidents(t, run, "")
		if len(out.list) != 1 || out.list[0].State != "resolved" {
			t.Fatalf("after the storm: incidents %+v, want one resolved\nlog:\n%s", out.list, run.stderr.String())
		}
		id := out.list[0].ID
		status, body := apiGet(t, run, "/api/v1/incidents/"+id)
		if status != http.StatusOK {
			t.Fatalf("GET /api/v1/incidents/%s: %d %s", id, status, body)
		}
		if err := json.Unmarshal([]byte(body), &out.record); err != nil {
			t.Fatal(err)
		}
		if status, out.markdown = apiGet(t, run, "/incidents/"+id+"/postmortem.md"); status != http.StatusOK {
			t.Fatalf("postmortem.md: %d %s", status, out.markdown)
		}
		if status, out.html = apiGet(t, run, "/incidents/"+id+"/postmortem"); status != http.StatusOK {
			t.Fatalf("postmortem: %d %s", status, out.html)
		}
		if err := run.stop(); err != nil {
			t.Fatalf("daemon: %v", err)
		}
	})
	return out
}

func apiGet(t *testing.T, run *daemonRun, path string) (int, string) {
	t.Helper()
	resp, err := run.api.Get("http://" + run.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

func getIncidents(t *testing.T, run *daemonRun, query string) []incident.Summary {
	t.Helper()
	status, body := apiGet(t, run, "/api/v1/incidents"+query)
	if status != http.StatusOK {
		t.Fatalf("GET /api/v1/incidents%s: %d %s", query, status, body)
	}
	var list struct{ Incidents []incident.Summary }
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("GET /api/v1/incidents%s: %v", query, err)
	}
	return list.Incidents
}

// TestPreemptStormPostmortemGolden: the draft of a simulated preempt
// storm, written from the run, matches testdata/preempt_storm_postmortem.md
// (go test -run TestPreemptStormPostmortemGolden -update rewrites it).
func TestPreemptStormPostmortemGolden(t *testing.T) {
	run := playPreemptStorm(t)
	golden := filepath.Join("testdata", "preempt_storm_postmortem.md")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(run.markdown), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if run.markdown != string(want) {
		t.Errorf("postmortem differs from %s (-update rewrites it):\n%s", golden, run.markdown)
	}
	if run.openStatus != http.StatusConflict || !strings.Contains(run.openBody, "still firing") {
		t.Errorf("postmortem of the firing incident: %d %q, want 409 saying it is still firing", run.openStatus, run.openBody)
	}
	for _, want := range []string{"<h2", "<table>", `<input checked="" disabled="" type="checkbox"`} {
		if want == `<input checked="" disabled="" type="checkbox"` {
			want = `type="checkbox"`
		}
		if !strings.Contains(run.html, want) {
			t.Errorf("rendered postmortem has no %s", want)
		}
	}
}

// TestPreemptStormPostmortemNumbersAreTheJournals: the draft's impact and
// evidence numbers are the journal's signals of the run (peak queue,
// peak TTFT, the retraction evidence), and the run really was the storm
// played, so the golden cannot drift into templated text.
func TestPreemptStormPostmortemNumbersAreTheJournals(t *testing.T) {
	run := playPreemptStorm(t)
	rec := run.record
	if rec.Class != detect.PreemptStorm || rec.FiredAt.IsZero() || rec.Open() {
		t.Fatalf("record: class %s fired %s resolved %s, want a resolved preempt_storm", rec.Class, rec.FiredAt, rec.ResolvedAt)
	}
	peakOf := func(signals []incident.Signal, name string) incident.Point {
		t.Helper()
		for _, s := range signals {
			if s.Name == name && len(s.Points) > 0 {
				best := s.Points[0]
				for _, p := range s.Points {
					if p.Value > best.Value {
						best = p
					}
				}
				return best
			}
		}
		t.Fatalf("no signal %q in %+v", name, signals)
		return incident.Point{}
	}
	queue := peakOf(rec.Impact, incident.ImpactQueued)
	if queue.Value != 40 {
		t.Errorf("peak queue %v, want the 40 the storm played", queue.Value)
	}
	ttft := peakOf(rec.Impact, incident.ImpactTTFT)
	for _, want := range []string{
		fmt.Sprintf("Queued requests: peak %s at %s", detect.FormatNumber(queue.Value), queue.At.UTC().Format("15:04:05")),
		fmt.Sprintf("Time to first token p99: peak %s s at %s", detect.FormatNumber(ttft.Value), ttft.At.UTC().Format("15:04:05")),
		"Replicas affected: 1 (r0)",
	} {
		if !strings.Contains(run.markdown, want) {
			t.Errorf("postmortem lacks %q:\n%s", want, run.markdown)
		}
	}
	var retractions *incident.Signal
	for i, s := range rec.Signals {
		if strings.Contains(s.Name, "retract") {
			retractions = &rec.Signals[i]
			break
		}
	}
	if retractions == nil {
		t.Fatalf("no retraction evidence among %d signals", len(rec.Signals))
	}
	pk := peakOf(rec.Signals, retractions.Name)
	if pk.Value < 2.5 || pk.Value > 3.5 {
		t.Errorf("peak %s %v, want about the 3/s played", retractions.Name, pk.Value)
	}
	row := fmt.Sprintf("%s%s at %s", detect.FormatNumber(pk.Value), retractions.Unit, pk.At.UTC().Format("15:04:05"))
	if !strings.Contains(run.markdown, row) {
		t.Errorf("postmortem lacks the retraction peak %q:\n%s", row, run.markdown)
	}
	kinds := map[incident.EventKind]bool{}
	for _, e := range rec.Timeline {
		kinds[e.Kind] = true
	}
	for _, k := range []incident.EventKind{incident.EventFirstFinding, incident.EventFired, incident.EventNotified, incident.EventResolved} {
		if !kinds[k] {
			t.Errorf("timeline has no %s event: %+v", k, rec.Timeline)
		}
	}
	if len(rec.Deliveries) == 0 {
		t.Error("no deliveries recorded")
	}
}
