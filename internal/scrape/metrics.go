package scrape

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are the scraper's own metrics.
type metrics struct {
	scrapes      *prometheus.CounterVec   // target, result
	duration     *prometheus.HistogramVec // kind
	up           *prometheus.GaugeVec     // target
	samples      *prometheus.GaugeVec     // target
	appendErrors prometheus.Counter
	familyFilter *prometheus.CounterVec // outcome
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		scrapes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_scrapes_total",
			Help: "Scrapes of SGLang targets by outcome: ok or the failure reason.",
		}, []string{"target", "result"}),
		// Labelled by kind, not target: a histogram per target would cost
		// a dozen series for each of a thousand replicas.
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "watchdog_scrape_duration_seconds",
			Help:    "Duration of scrapes (fetch, parse and normalize) by target kind.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"kind"}),
		up: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_target_up",
			Help: "1 if the last scrape of the target succeeded, else 0.",
		}, []string{"target"}),
		samples: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_scrape_samples",
			Help: "Samples of the last successful scrape of the target, after normalization.",
		}, []string{"target"}),
		appendErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_scrape_append_errors_total",
			Help: "Scrapes the window store refused (e.g. too many series).",
		}),
		familyFilter: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_scrape_family_filter_total",
			Help: "Successful scrapes of engine targets by family filtering: filtered (only the kept families asked for), full, or fallback (a filtered answer rejected, then a full one).",
		}, []string{"outcome"}),
	}
	for _, o := range [...]string{filterFiltered, filterFull, filterFallback} {
		m.familyFilter.WithLabelValues(o)
	}
	for _, k := range [...]string{KindEngine, KindGateway} {
		m.duration.WithLabelValues(k)
	}
	return m
}

// addTarget pre-creates the target's series so a rate over them exists
// from the first scrape on.
func (m *metrics) addTarget(name string) {
	for _, r := range results {
		m.scrapes.WithLabelValues(name, r)
	}
	m.up.WithLabelValues(name)
	m.samples.WithLabelValues(name)
}

// removeTarget deletes the target's series so removed targets do not
// linger as stale "down" series.
func (m *metrics) removeTarget(name string) {
	m.scrapes.DeletePartialMatch(prometheus.Labels{"target": name})
	m.up.DeleteLabelValues(name)
	m.samples.DeleteLabelValues(name)
}
