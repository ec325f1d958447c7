package notify

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Delivery results, the values of the "result" label.
const (
	ResultDelivered = "delivered" // the provider accepted the event
	ResultSkipped   = "skipped"   // nothing needed sending (duplicate, no-op update)
	ResultFailed    = "failed"    // permanently failed or retries exhausted: a lost notification, reported
)

// Metrics are the delivery metrics of every queue. Build them once with
// NewMetrics; a Dispatcher does this itself.
type Metrics struct {
	reg       prometheus.Registerer
	total     *prometheus.CounterVec
	failures  *prometheus.CounterVec
	retries   *prometheus.CounterVec
	queueLen  *prometheus.GaugeVec
	latency   *prometheus.HistogramVec
	saveFails *prometheus.CounterVec
	// recordsEvicted counts incident records forgotten beyond max_records.
	recordsEvicted *prometheus.CounterVec
}

// NewMetrics registers the notification metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		reg: reg,
		total: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_notifications_total",
			Help: "Notifications by integration and final result (delivered, skipped, failed).",
		}, []string{"integration", "result"}),
		failures: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_notification_failures_total",
			Help: "Failed delivery attempts by integration and reason.",
		}, []string{"integration", "reason"}),
		retries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_notification_retries_total",
			Help: "Delivery attempts scheduled for retry.",
		}, []string{"integration"}),
		queueLen: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_notification_queue_length",
			Help: "Undelivered notifications waiting in the integration's outbox.",
		}, []string{"integration"}),
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "watchdog_notification_delivery_latency_seconds",
			Help:    "Time from enqueueing a notification to its successful delivery.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900},
		}, []string{"integration"}),
		saveFails: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_notification_state_save_failures_total",
			Help: "Failed writes of the integration's outbox and incident records.",
		}, []string{"integration"}),
		recordsEvicted: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_notification_records_evicted_total",
			Help: "Incident records forgotten because the integration kept more than max_records.",
		}, []string{"integration"}),
	}
}

// initFor pre-creates every label value of one integration and registers
// its oldest-undelivered-age gauge, computed at collect time.
func (m *Metrics) initFor(integration string, oldestAge func() float64) {
	for _, r := range []string{ResultDelivered, ResultSkipped, ResultFailed} {
		m.total.WithLabelValues(integration, r)
	}
	for _, r := range Reasons {
		m.failures.WithLabelValues(integration, string(r))
	}
	m.retries.WithLabelValues(integration)
	m.queueLen.WithLabelValues(integration)
	m.latency.WithLabelValues(integration)
	m.saveFails.WithLabelValues(integration)
	m.recordsEvicted.WithLabelValues(integration)
	promauto.With(m.reg).NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "watchdog_notification_oldest_undelivered_age_seconds",
		Help:        "Age of the oldest undelivered notification in the integration's outbox, 0 when empty.",
		ConstLabels: prometheus.Labels{"integration": integration},
	}, oldestAge)
}
