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

	if err := testutil.GatherAndCompare(reg, strings.NewReader(""), "watchdog_config_last_error_info"); err != nil {
		t.Errorf("an error reason after a success: %v", err)
	}
	reason := func(want string) {
		t.Helper()
		if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watchdog_config_last_error_info 1 for the step at which the last configuration load failed (env, read, parse, validate, apply); no series after a success.
# TYPE watchdog_config_last_error_info gauge
watchdog_config_last_error_info{reason="`+want+`"} 1
`), "watchdog_config_last_error_info"); err != nil {
			t.Error(err)
		}
	}

	source.err = stepError{"parse", errors.New("yaml: line 3: field tresholds not found")}
	err := r.Reload(time.Unix(300, 0))
	if err == nil || !strings.Contains(err.Error(), "tresholds") || r.current != 2 {
		t.Fatalf("load failure: %v, current %d", err, r.current)
	}
	reason("parse")
	source.err = errors.New("an error that names no step")
	if err := r.Reload(time.Unix(350, 0)); err == nil {
		t.Fatal("load failure accepted")
	}
	reason(ReasonLoad)
	source.err, source.cfg = nil, -5
	if err := r.Reload(time.Unix(400, 0)); err == nil || r.current != 2 {
		t.Fatalf("apply failure accepted: current %d", r.current)
	}
	reason(ReasonApply)
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

// stepError is a load error that names its step, as config.LoadError does.
type stepError struct {
	step string
	err  error
}

func (e stepError) Error() string  { return e.err.Error() }
func (e stepError) Reason() string { return e.step }

// A daemon that waited for a usable configuration hands its Status's
// series to the reloader it then builds on the same registry: the failures
// counted while waiting stay counted, and the success clears the reason.
func TestStatusSeriesContinueIntoTheReloader(t *testing.T) {
	reg := prometheus.NewRegistry()
	waiting := NewStatus(reg)
	waiting.Failed("validate")
	waiting.Failed("validate")
	waiting.Succeeded(time.Unix(500, 0))
	New(1, func() (int, error) { return 1, nil }, func(int, int) error { return nil }, time.Unix(500, 0), reg, zap.NewNop())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP watchdog_config_last_reload_successful Whether the last configuration load or reload succeeded (1) or was rejected (0).
# TYPE watchdog_config_last_reload_successful gauge
watchdog_config_last_reload_successful 1
# HELP watchdog_config_last_reload_success_timestamp_seconds Time of the last successful configuration load.
# TYPE watchdog_config_last_reload_success_timestamp_seconds gauge
watchdog_config_last_reload_success_timestamp_seconds 500
# HELP watchdog_config_reloads_total Configuration loads and reloads by result.
# TYPE watchdog_config_reloads_total counter
watchdog_config_reloads_total{result="failure"} 2
watchdog_config_reloads_total{result="success"} 1
`), "watchdog_config_last_reload_successful", "watchdog_config_last_reload_success_timestamp_seconds",
		"watchdog_config_reloads_total", "watchdog_config_last_error_info"); err != nil {
		t.Error(err)
	}
}
