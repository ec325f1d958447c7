// Package reload applies a new configuration to a running daemon on SIGHUP
// or POST /-/reload. A configuration that fails to load or to apply is
// rejected whole: the running one stays in force, the reason is logged and
// watchdog_config_last_reload_successful drops to 0 until a good one loads.
// Status holds those metrics, so a daemon still waiting for its first
// usable configuration reports on the same series.
package reload

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/promreg"
)

// Reasons of watchdog_config_last_error_info besides the ones a load error
// names itself (ReasonOf).
const (
	// ReasonLoad is a load error that names no step.
	ReasonLoad = "load"
	// ReasonApply is a configuration that loaded but that the running
	// components refused.
	ReasonApply = "apply"
)

// ReasonOf is the step a load error failed at, when it says so with a
// Reason() method (config.LoadError does), else ReasonLoad.
func ReasonOf(err error) string {
	var r interface{ Reason() string }
	if errors.As(err, &r) && r.Reason() != "" {
		return r.Reason()
	}
	return ReasonLoad
}

// Status is the outcome of the configuration's loads, as metrics. Every
// Status on one registry shares the same series: the daemon's reloader
// continues what the wait for a first usable configuration began.
type Status struct {
	success   prometheus.Gauge
	timestamp prometheus.Gauge
	total     *prometheus.CounterVec
	lastError *prometheus.GaugeVec
}

// NewStatus registers the metrics on reg, or takes those already there.
func NewStatus(reg prometheus.Registerer) *Status {
	s := &Status{
		success: promreg.Reuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "watchdog_config_last_reload_successful",
			Help: "Whether the last configuration load or reload succeeded (1) or was rejected (0)."})),
		timestamp: promreg.Reuse(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "watchdog_config_last_reload_success_timestamp_seconds",
			Help: "Time of the last successful configuration load."})),
		total: promreg.Reuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "watchdog_config_reloads_total",
			Help: "Configuration loads and reloads by result."}, []string{"result"})),
		// The step, never the error's text: that can quote a URL.
		lastError: promreg.Reuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "watchdog_config_last_error_info",
			Help: "1 for the step at which the last configuration load failed (env, read, parse, validate, apply); no series after a success."}, []string{"reason"})),
	}
	s.total.WithLabelValues("success")
	s.total.WithLabelValues("failure")
	return s
}

// Running records that the configuration in force loaded at now, without
// counting a load: the daemon starting with it.
func (s *Status) Running(now time.Time) {
	s.success.Set(1)
	s.timestamp.Set(float64(now.Unix()))
	s.lastError.Reset()
}

// Succeeded counts a load that succeeded at now.
func (s *Status) Succeeded(now time.Time) {
	s.Running(now)
	s.total.WithLabelValues("success").Inc()
}

// Failed counts a load that failed at the step reason.
func (s *Status) Failed(reason string) {
	s.success.Set(0)
	s.lastError.Reset()
	s.lastError.WithLabelValues(reason).Set(1)
	s.total.WithLabelValues("failure").Inc()
}

// Reloader serialises reloads of a configuration of type C.
type Reloader[C any] struct {
	mu      sync.Mutex
	load    func() (C, error)
	apply   func(old, next C) error
	current C
	log     *zap.Logger
	status  *Status
}

// New returns a reloader whose running configuration is current. load reads
// and validates the configuration from its sources; apply makes the running
// components use it (and must leave them unchanged when it fails).
func New[C any](current C, load func() (C, error), apply func(old, next C) error, now time.Time, reg prometheus.Registerer, logger *zap.Logger) *Reloader[C] {
	r := &Reloader[C]{load: load, apply: apply, current: current, log: logger, status: NewStatus(reg)}
	r.status.Running(now)
	return r
}

// Reload loads and applies the configuration. On error the running
// configuration is kept and the error says why.
func (r *Reloader[C]) Reload(now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := r.load()
	reason := ReasonOf(err)
	if err == nil {
		err, reason = r.apply(r.current, next), ReasonApply
	}
	if err != nil {
		r.status.Failed(reason)
		r.log.Error("configuration reload rejected; the running configuration stays in force", zap.String("reason", reason), zap.Error(err))
		return fmt.Errorf("reload rejected, running configuration kept: %w", err)
	}
	r.current = next
	r.status.Succeeded(now)
	r.log.Info("configuration reloaded")
	return nil
}
