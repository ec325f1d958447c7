package ui

import (
	"net/http/httptest"
	"testing"
	"time"

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
