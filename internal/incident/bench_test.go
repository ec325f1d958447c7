package incident

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// stormFleet is a round in which n replicas each have a preempt storm
// with 20 evidence numbers, and the tracker's incidents and transitions
// after it.
func stormFleet(tr *alert.Tracker, n int, now time.Time) (assess.Round, []alert.Incident, []alert.Transition) {
	var findings []detect.Finding
	var reps []detect.Replica
	for i := range n {
		f := storm(float64(i % 7))
		f.Replica = fmt.Sprintf("r%d", i)
		for k := range 19 {
			f.Evidence = append(f.Evidence, detect.Evidence{Name: fmt.Sprintf("evidence %d", k), Value: float64(k), Baseline: 1, HasBaseline: true})
		}
		findings = append(findings, f)
		reps = append(reps, detect.Replica{Name: f.Replica, Model: "m"})
	}
	cfg := correlate.DefaultConfig()
	cfg.FleetMinReplicas = n + 1 // replica incidents, not one fleet incident
	round := assess.Round{At: now, Groups: correlate.Correlate(cfg, findings, reps)}
	changes := tr.Update(round)
	return round, tr.Incidents(), changes
}

// BenchmarkJournalObserve is one round of 100 open incidents, each with
// 20 signals, in a journal already holding 240 points per signal: the
// per-round cost the evaluation loop pays (no store).
func BenchmarkJournalObserve(b *testing.B) {
	tr := alert.NewTracker(alert.Config{Timing: alert.Timing{KeepFiringFor: time.Hour}})
	j := New(Options{Retention: time.Hour, MaxIncidents: 500, MaxPoints: 240}, prometheus.NewRegistry(), t0)
	at := t0
	for range 300 {
		round, alerts, changes := stormFleet(tr, 100, at)
		j.Observe(round, alerts, changes, nil, at)
		at = at.Add(5 * time.Second)
	}
	round, alerts, changes := stormFleet(tr, 100, at)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		at = at.Add(5 * time.Second)
		round.At = at
		j.Observe(round, alerts, changes, nil, at)
	}
}

// TestSavedRecordSizeIsBounded: a record at its bounds (20 signals of
// the default 120 points, a full timeline) stays under 250 KB of JSON,
// so max_incidents bounds the document.
func TestSavedRecordSizeIsBounded(t *testing.T) {
	tr := alert.NewTracker(alert.Config{Timing: alert.Timing{KeepFiringFor: time.Hour}})
	j := New(Options{Retention: time.Hour, MaxIncidents: 10, MaxPoints: 120}, prometheus.NewRegistry(), t0)
	at := t0
	for range 2000 {
		round, alerts, changes := stormFleet(tr, 1, at)
		j.Observe(round, alerts, changes, nil, at)
		at = at.Add(5 * time.Second)
	}
	r := j.Incidents()[0]
	for i := range 2 * maxTimeline {
		j.event(j.records[r.ID], Event{At: at.Add(time.Duration(i) * time.Second), Kind: EventNotified, Text: "repeat delivered to slack", Integration: "slack"})
	}
	r = j.Incidents()[0]
	if len(r.Timeline) > maxTimeline {
		t.Errorf("timeline %d entries, want at most %d", len(r.Timeline), maxTimeline)
	}
	for _, s := range r.Signals {
		if len(s.Points) > 120 {
			t.Errorf("signal %s has %d points", s.Name, len(s.Points))
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one record at its bounds: %d signals, %d bytes of JSON", len(r.Signals), len(b))
	if len(b) > 250<<10 {
		t.Errorf("a record at its bounds is %d bytes", len(b))
	}
}
