package reload

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

func TestBadConfigKeepsTheRunningOneAndSaysWhy(t *testing.T) {
	reg := prometheus.NewRegistry()
	source := struct {
		cfg int
		err error
	}{cfg: 2}
	var applied []int
	r := New(1, func() (int, error) { return source.cfg, source.err },
		func(old, next int) error {
			if next < 0 {
				return errors.New("negative thresholds cannot be applied")
			}
			applied = append(applied, next)
			return nil
		}, time.Unix(100, 0), reg, zap.NewNop())

	if err := r.Reload(time.Unix(200, 0)); err != nil || r.current != 2 {
		t.Fatalf("good reload: %v, current %d", err, r.current)
	}
	gauge := func(name string) float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	if gauge("watchdog_config_last_reload_successful") != 1 || gauge("watchdog_config_last_reload_success_timestamp_seconds") != 200 {
		t.Fatal("success not recorded")
	}

	source.err = errors.New("yaml: line 3: field tresholds not found")
	err := r.Reload(time.Unix(300, 0))
	if err == nil || !strings.Contains(err.Error(), "tresholds") || r.current != 2 {
		t.Fatalf("load failure: %v, current %d", err, r.current)
	}
	source.err, source.cfg = nil, -5
	if err := r.Reload(time.Unix(400, 0)); err == nil || r.current != 2 {
		t.Fatalf("apply failure accepted: current %d", r.current)
	}
	if gauge("watchdog_config_last_reload_successful") != 0 || gauge("watchdog_config_last_reload_success_timestamp_seconds") != 200 {
		t.Fatal("failure not recorded")
	}
	if len(applied) != 1 {
		t.Fatalf("applied %v", applied)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}
