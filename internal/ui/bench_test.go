package ui

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// BenchmarkReplicaHistory is one replica's plot history: 60 steps of
// assess.ReadSnapshot 4 s apart over a window of 2 s scrapes. The fleet page pays it
// once per replica per round (cached), for at most PageSize replicas.
func BenchmarkReplicaHistory(b *testing.B) {
	run, err := runFleet()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		run.store.View("sim-0", func(w detect.Window) {
			if h := history(w, run.at, 4*time.Minute, 4*time.Second, detect.DefaultInferenceEndpoints); len(h) != 60 {
				b.Fatalf("%d steps", len(h))
			}
		})
	}
}

// BenchmarkFleetPageCached is the fleet page of 5 replicas once the
// round's sparklines are cached: what a refreshing browser costs.
func BenchmarkFleetPageCached(b *testing.B) {
	run, err := runFleet()
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(Options{Alerts: run.loop, Windows: run.store, MinStep: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkIncidentPage is one incident page of a long incident: ten
// evidence signals (one constant) and five impact signals of 120 points
// each, the journal's cap.
func BenchmarkIncidentPage(b *testing.B) {
	at := time.Date(2026, 5, 29, 12, 0, 0, 0, time.UTC)
	pts := func(constant bool) []incident.Point {
		ps := make([]incident.Point, 120)
		for i := range ps {
			v := float64(i % 17)
			if constant {
				v = 16
			}
			ps[i] = incident.Point{At: at.Add(time.Duration(i) * 30 * time.Second), Value: v, Baseline: 2, HasBaseline: true, Limit: 6, HasLimit: true}
		}
		return ps
	}
	rec := incident.Record{Summary: incident.Summary{ID: "long", Class: detect.PreemptStorm, Replica: "sim-0", State: alert.StateResolved,
		OpenedAt: at, FiredAt: at.Add(time.Minute), ResolvedAt: at.Add(time.Hour)}}
	for i := range 10 {
		rec.Signals = append(rec.Signals, incident.Signal{Name: fmt.Sprintf("signal %d", i), Unit: "/s", Threshold: ">= 3x baseline",
			Limit: 6, HasLimit: true, Points: pts(i == 3)})
	}
	for i := range 5 {
		rec.Impact = append(rec.Impact, incident.Signal{Name: fmt.Sprintf("impact %d", i), Unit: "s", Points: pts(false)})
	}
	h, err := New(Options{Alerts: noAlerts{}, Windows: noWindows{}, Incidents: fakeJournal{records: []incident.Record{rec}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/incidents/long", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
	}
}
