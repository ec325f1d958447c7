// Package reload applies a new configuration to a running daemon on SIGHUP
// or POST /-/reload. A configuration that fails to load or to apply is
// rejected whole: the running one stays in force, the reason is logged and
// watchdog_config_last_reload_successful drops to 0 until a good one loads.
package reload

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
)

// Reloader serialises reloads of a configuration of type C.
type Reloader[C any] struct {
	mu      sync.Mutex
	load    func() (C, error)
	apply   func(old, next C) error
	current C
	log     *zap.Logger

	success   prometheus.Gauge
	timestamp prometheus.Gauge
	total     *prometheus.CounterVec
}

// New returns a reloader whose running configuration is current. load reads
// and validates the configuration from its sources; apply makes the running
// components use it (and must leave them unchanged when it fails).
func New[C any](current C, load func() (C, error), apply func(old, next C) error, now time.Time, reg prometheus.Registerer, logger *zap.Logger) *Reloader[C] {
	f := promauto.With(reg)
	r := &Reloader[C]{
		load: load, apply: apply, current: current, log: logger,
		success: f.NewGauge(prometheus.GaugeOpts{Name: "watchdog_config_last_reload_successful",
			Help: "Whether the last configuration reload succeeded (1) or was rejected (0)."}),
		timestamp: f.NewGauge(prometheus.GaugeOpts{Name: "watchdog_config_last_reload_success_timestamp_seconds",
			Help: "Time of the last successful configuration load."}),
		total: f.NewCounterVec(prometheus.CounterOpts{Name: "watchdog_config_reloads_total",
			Help: "Configuration reloads by result."}, []string{"result"}),
	}
	r.success.Set(1)
	r.timestamp.Set(float64(now.Unix()))
	r.total.WithLabelValues("success")
	r.total.WithLabelValues("failure")
	return r
}

// Reload loads and applies the configuration. On error the running
// configuration is kept and the error says why.
func (r *Reloader[C]) Reload(now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := r.load()
	if err == nil {
		err = r.apply(r.current, next)
	}
	if err != nil {
		r.success.Set(0)
		r.total.WithLabelValues("failure").Inc()
		r.log.Error("configuration reload rejected; the running configuration stays in force", zap.Error(err))
		return fmt.Errorf("reload rejected, running configuration kept: %w", err)
	}
	r.current = next
	r.success.Set(1)
	r.timestamp.Set(float64(now.Unix()))
	r.total.WithLabelValues("success").Inc()
	r.log.Info("configuration reloaded")
	return nil
}
