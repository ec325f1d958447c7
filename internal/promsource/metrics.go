package promsource

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	queries    *prometheus.CounterVec
	backfilled prometheus.Counter
	failures   prometheus.Counter
	duration   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		queries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_prometheus_queries_total",
			Help: "Queries to the Prometheus-compatible API (history:), by kind (range, replicas: the listing before a range, latest) and result (ok, partial: warnings or isPartial, too_large, timeout, server_error, bad_request, bad_response, error).",
		}, []string{"kind", "result"}),
		backfilled: f.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_history_backfilled_samples_total",
			Help: "Normalized samples read from the Prometheus-compatible API into the windows at start.",
		}),
		failures: f.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_history_backfill_failures_total",
			Help: "Backfills that could not read all of their range (the windows start without the missing part).",
		}),
		duration: f.NewGauge(prometheus.GaugeOpts{
			Name: "watchdog_history_backfill_duration_seconds",
			Help: "How long the last backfill took.",
		}),
	}
}
