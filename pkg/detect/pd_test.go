package detect_test

import (
	"math"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// pdDecode is the decode server of a PD pair: the failure counters exist
// and stay at zero.
func pdDecode() *scenario {
	s := fullEngine().with(
		counter(series.BootstrapFailedTotal, constant(0)),
		counter(series.TransferFailedTotal, constant(0)),
		gauge("sglang:num_decode_transfer_queue_reqs", constant(1)),
	)
	s.engineType = "decode"
	return s
}

func TestPDTransferFailurePages(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
		severity detect.Severity
		evidence string
		rate     float64
		want     string
	}{
		// 0.5 of 10 requests/s fail the KV transfer: 5%.
		{"transfer failures", pdDecode().with(counter(series.TransferFailedTotal, stepAt(incident, 0, 0.5))),
			detect.Warning, "transfer failures/s", 0.5, "mooncake"},
		// 2 of 10: critical.
		{"bootstrap failures", pdDecode().with(
			counter(series.BootstrapFailedTotal, stepAt(incident, 0, 2)),
			counter(series.NumRequestsTotal, stepAt(incident, 10, 8))),
			detect.Critical, "bootstrap failures/s", 2, "bootstrap port"},
		// The gateway's PD counters.
		{"gateway PD counters", func() *scenario {
			s := newScenario(
				counter("smg_pd_bootstrap_failures_total", constant(0)),
				counter("smg_pd_kv_transfer_failures_total", stepAt(incident, 0.001, 1)))
			s.kind, s.model = "gateway", ""
			return s
		}(), detect.Warning, "transfer failures/s (smg_pd_kv_transfer_failures_total)", 1, "mooncake"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := one(t, run(t, tt.scenario, detect.PDTransferFailure))
			if tt.scenario.kind == "engine" {
				checkCommon(t, f, detect.PDTransferFailure)
			}
			if f.Severity != tt.severity || f.Layer != detect.LayerTransfer {
				t.Errorf("severity %s layer %s; want %s kv_transfer", f.Severity, f.Layer, tt.severity)
			}
			if e := evidenceNamed(t, f, tt.evidence); !approx(e.Value, tt.rate, 0.01) {
				t.Errorf("evidence = %+v", e)
			}
			contains(t, "diagnosis", f.Diagnosis, tt.want)
		})
	}
}

func TestPDTransferFailureDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"PD off", fullEngine()},
		{"healthy PD", pdDecode()},
		{"healthy heavy load", pdDecode().with(gauge(series.NumRunningReqs, constant(256)), counter(series.NumRequestsTotal, constant(40)))},
		// Always a little failure, no rise.
		{"steady low failure rate", pdDecode().with(counter(series.TransferFailedTotal, stepAt(incident, 0.1, 0.12)))},
		// Two failures in two minutes: below the floor.
		{"low traffic", pdDecode().with(counter(series.TransferFailedTotal, stepAt(incident, 0, 0.0167)))},
		{"counter reset after restart", func() *scenario {
			s := pdDecode().with(counter(series.TransferFailedTotal, constant(0.01)))
			s.restarts = []time.Duration{64 * minute}
			return s
		}()},
		{"missing series", newScenario(gauge(series.NumRunningReqs, constant(4)))},
		{"NaN/Inf samples", pdDecode().with(
			counter(series.TransferFailedTotal, constant(0)).corrupted(every(3, math.Inf(1))),
			counter(series.BootstrapFailedTotal, constant(0)).corrupted(every(2, math.NaN())),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.PDTransferFailure))
		})
	}
}

// PDTransferFailure's golden page (checkPage).
func TestGoldenPageEventsPDTransferFailure(t *testing.T) {
	checkPage(t, pageCase{class: detect.PDTransferFailure, scenario: pdDecode().with(counter(series.TransferFailedTotal, stepAt(incident, 0, 0.5)))})
}
