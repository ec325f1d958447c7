package sim_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
)

// The demo command serves each replica on its own loopback port and steps
// the fleet on a ticker; the watchdog then scrapes those ports as if they
// were real SGLang servers.
func ExampleFleet_Handler() {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	fleet := sim.NewFleet(sim.FleetConfig{Seed: 1, Scenario: sim.DemoScenario(1), Warmup: time.Minute})
	for i, name := range fleet.Replicas() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s: http://%s/metrics\n", name, ln.Addr())
		srv := &http.Server{Handler: fleet.Handler(i), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln)
		defer srv.Close()
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			fleet.Advance(now) // the first call fixes scenario time zero
			_ = fleet.Phase(now)
		}
	}
}

// A one-shot check jumps straight into an incident with synthetic times.
func ExampleIncidentScenario() {
	sc, err := sim.IncidentScenario(sim.ClassCacheCollapse)
	if err != nil {
		panic(err)
	}
	start := time.Unix(0, 0)
	fleet := sim.NewFleet(sim.FleetConfig{Seed: 1, Start: start, Scenario: sc, Warmup: time.Minute})
	at := start.Add(sim.IncidentBaseline + 45*time.Second)
	fleet.Advance(at)
	fmt.Println(fleet.Phase(at))
	// Output: cache_collapse
}
