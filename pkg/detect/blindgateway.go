package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// gatewayClientFamilies are what the gateway paths of retry_avalanche and
// error_rate read: client requests and the responses they got (legacy
// sgl_router_http_* names map onto them).
var gatewayClientFamilies = []string{series.GatewayHTTPRequestsTotal, series.GatewayHTTPResponsesTotal}

// gatewayWorkFamilies move when a gateway routes requests, whatever else
// it exposes. The Rust metrics crate creates a series on its first
// increment, so a gateway that never routed has none of them.
var gatewayWorkFamilies = []string{
	"smg_router_requests_total", series.GatewayUpstreamResponses, series.GatewayRetriesTotal,
	gatewayWorkerRequestsActive, "smg_http_connections_active",
}

// judgedRange is the range a target's families are looked for in: the
// configured range back from now, from the start of the target's process
// (start) when it is younger. ok is false within the grace after that
// start, when a starting server may not expose everything yet.
func (d *MetricsBlindDetector) judgedRange(w Window, now time.Time) (start, from time.Time, ok bool) {
	start = startOf(w)
	if start.IsZero() || now.Sub(start) < d.cfg.Grace {
		return start, time.Time{}, false
	}
	from = now.Add(-d.cfg.Range)
	if start.After(from) {
		from = start.Add(-time.Nanosecond)
	}
	return start, from, true
}

// gatewayBlind judges a gateway target: once it routes traffic, the
// gateway paths of retry_avalanche and error_rate need its client-facing
// counters. Without them both are silently blind there — the case of an
// unknown release's names, or a relabelling proxy. A gateway that never
// routed anything exposes few families, and is not judged.
func (d *MetricsBlindDetector) gatewayBlind(w Window, now time.Time) []Finding {
	_, from, ok := d.judgedRange(w, now)
	if !ok {
		return nil
	}
	// Engine families on a target declared a gateway: the engine
	// detectors read it by its families and the engine path applies.
	for _, name := range schedulerFamilies {
		if present(w, name, from, now) {
			return nil
		}
	}
	routed := false
	for _, name := range gatewayWorkFamilies {
		if v, ok := w.Max(Sel(name), from, now); ok && v > 0 {
			routed = true
			break
		}
	}
	if !routed {
		return nil
	}
	var missing []string
	for _, name := range gatewayClientFamilies {
		if !present(w, name, from, now) {
			missing = append(missing, name)
		}
	}
	var classes []string
	for _, class := range []Class{RetryAvalanche, ErrorRate} {
		for _, n := range d.needs {
			if n.class == class {
				classes = append(classes, string(class))
				break
			}
		}
	}
	if len(missing) == 0 || len(classes) == 0 {
		return nil
	}

	f := finding(MetricsBlind, w, Warning, LayerTransport)
	f.Evidence = []Evidence{
		{Name: "detectors blind on this gateway", Value: float64(len(classes))},
		{Name: "blind: " + strings.Join(classes, ", ") + " — needs " + strings.Join(missing, " and "), Value: 0, Threshold: "families found"},
	}
	f.Summary = fmt.Sprintf("Metrics blind: %s cannot see this gateway (it routes traffic, but %s is missing)", strings.Join(classes, ", "), strings.Join(missing, " and "))
	f.Diagnosis = sentence(
		fmt.Sprintf("Scrape layer: the gateway routes traffic, but for the last %s its metrics lacked %s: the client requests and the responses they got.", ShortDuration(now.Sub(from).Round(time.Second)), strings.Join(missing, " and ")),
		"Without them a retry storm or failing users behind this gateway are never paged. Usual causes: a gateway release whose names the watchdog does not know (it reads smg_* and the legacy sgl_router_* names), a proxy or relabelling rule that renames or drops families, or a target pointing at the gateway's main port instead of its metrics listener (--prometheus-port, default 29000).")
	f.Emergency = []string{
		"Curl the gateway's metrics listener and look for smg_http_requests_total (or sgl_router_http_requests_total on releases before 2025-12).",
		"Until fixed, watch the gateway's retries and error responses by hand.",
	}
	f.RootCause = []string{
		"Scrape the gateway's own metrics listener directly, unmodified.",
		"Pin a gateway release the watchdog knows, or report the new names so they can be mapped.",
	}
	return []Finding{f}
}
