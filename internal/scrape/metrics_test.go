package scrape

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	m.addTarget("r1")
	m.appendErrors.Inc()

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	// Every result is pre-created, so rate() works from the first scrape.
	if n := testutil.CollectAndCount(m.scrapes); n != len(results) {
		t.Errorf("%d scrapes_total series for one target, want %d", n, len(results))
	}
	m.removeTarget("r1")
	for _, c := range []prometheus.Collector{m.scrapes, m.up, m.samples} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%d series left after removeTarget", n)
		}
	}
}
