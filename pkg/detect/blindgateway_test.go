package detect_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// routingGateway is a gateway that routes 40 requests/s but, in its
// metrics, lacks the client-facing pair the gateway paths read.
func routingGateway() *scenario {
	s := newScenario(
		counter("smg_router_requests_total", constant(40), "router_type", "http", "endpoint", "chat"),
		counter(series.GatewayUpstreamResponses, constant(40), "router_type", "http", "status_code", "200"),
		counter(series.GatewayRetriesTotal, constant(0.1), "worker_type", "regular", "endpoint", "chat"),
		gauge("smg_worker_requests_active", constant(20), "worker", "http://10.0.0.1:30000"),
	)
	s.kind, s.model = "gateway", ""
	return s
}

func TestMetricsBlindJudgesGateways(t *testing.T) {
	f := one(t, run(t, routingGateway(), detect.MetricsBlind))
	if f.Severity != detect.Warning || f.Layer != detect.LayerTransport {
		t.Errorf("severity %s layer %s; want warning scrape", f.Severity, f.Layer)
	}
	contains(t, "summary", f.Summary, "retry_avalanche, error_rate", "smg_http_requests_total and smg_http_responses_total")
	contains(t, "diagnosis", f.Diagnosis, "sgl_router_*")

	t.Run("only the enabled detectors are named", func(t *testing.T) {
		cfg := detect.DefaultConfig()
		detect.Edit(&cfg, func(s *detect.ErrorRateConfig) { s.Enabled = false })
		f := one(t, detectWith(t, routingGateway(), cfg, detect.MetricsBlind))
		if strings.Contains(f.Summary, "error_rate") {
			t.Errorf("summary names a disabled detector: %s", f.Summary)
		}
		detect.Edit(&cfg, func(s *detect.RetryAvalancheConfig) { s.Enabled = false })
		none(t, detectWith(t, routingGateway(), cfg, detect.MetricsBlind))
	})
}

func TestMetricsBlindGatewayDoesNotPage(t *testing.T) {
	tests := []struct {
		name     string
		scenario *scenario
	}{
		{"gateway with client counters", routingGateway().with(
			counter(series.GatewayHTTPRequestsTotal, constant(40), "method", "POST", "path", chat),
			counter(series.GatewayHTTPResponsesTotal, constant(40), "path", chat, "status_code", "200"),
		)},
		// The legacy gateway's client counters carry no path.
		{"legacy gateway", routingGateway().with(
			counter(series.GatewayHTTPRequestsTotal, constant(40)),
			counter(series.GatewayHTTPResponsesTotal, constant(40), "status_code", "200"),
		)},
		// A gateway nobody sends traffic to exposes few families.
		{"gateway that never routed", func() *scenario {
			s := newScenario(gauge(series.GatewayCircuitBreakerState, constant(0), "worker", "http://10.0.0.1:30000"))
			s.kind, s.model = "gateway", ""
			return s
		}()},
		{"within the grace", func() *scenario {
			s := routingGateway()
			s.length = time.Minute
			return s
		}()},
		// An engine declared a gateway: the engine path reads it.
		{"engine families on a gateway target", func() *scenario {
			s := healthyEngine()
			s.kind = "gateway"
			return s
		}()},
		{"counter reset after restart", func() *scenario {
			s := routingGateway().with(
				counter(series.GatewayHTTPRequestsTotal, constant(40), "method", "POST", "path", chat),
				counter(series.GatewayHTTPResponsesTotal, constant(40), "path", chat, "status_code", "200"),
			)
			s.restarts = []time.Duration{60 * minute}
			return s
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			none(t, run(t, tt.scenario, detect.MetricsBlind))
		})
	}
}
