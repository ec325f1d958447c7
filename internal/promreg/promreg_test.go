package promreg

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "watchdog_test_total", Help: "A test counter."}, []string{"reason"})
}

func TestReuseKeepsTheRegisteredSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := Reuse(reg, newCounter())
	first.WithLabelValues("a").Inc()
	second := Reuse(reg, newCounter())
	if second != first {
		t.Fatal("a second registration returned a new collector; its series would not be gathered")
	}
	second.WithLabelValues("a").Inc()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watchdog_test_total A test counter.
# TYPE watchdog_test_total counter
watchdog_test_total{reason="a"} 2
`), "watchdog_test_total"); err != nil {
		t.Error(err)
	}
}

func TestReuseWithoutRegistry(t *testing.T) {
	c := Reuse(nil, newCounter())
	c.WithLabelValues("a").Inc() // usable, just not gathered
	if got := testutil.ToFloat64(c.WithLabelValues("a")); got != 1 {
		t.Errorf("counter %v, want 1", got)
	}
}

func TestReusePanicsOnAClash(t *testing.T) {
	reg := prometheus.NewRegistry()
	Reuse(reg, newCounter())
	defer func() {
		if recover() == nil {
			t.Error("the same name with other labels registered without a panic")
		}
	}()
	Reuse(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "watchdog_test_total", Help: "A test counter."}))
}
