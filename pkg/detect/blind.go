package detect

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// MetricsBlind is the class of a target whose metrics the detectors cannot
// see into.
const MetricsBlind Class = "metrics_blind"

// MetricsBlindDetector reports, at warning severity, a target the other
// detectors cannot see into: /metrics answers but unusably (404 when SGLang
// runs without --enable-metrics, another HTTP error, an HTML login page, a
// truncated exposition), or the exposition lacks the families a detector needs
// (an old release, a proxy renaming or dropping families). Without it such
// a replica would simply never page. Only core needs count: families that
// are absent because a feature is off (LoRA, PD disaggregation, speculative
// decoding, the health probe) never make a replica blind, and families that
// appear only once requests finish are judged only after traffic was seen.
type MetricsBlindDetector struct {
	cfg   MetricsBlindConfig
	needs []need
}

// Class implements Detector.
func (d *MetricsBlindDetector) Class() Class { return MetricsBlind }

// need is what one enabled detector needs from an engine's exposition: any
// one of the alternatives, each a set of families that must all be there.
type need struct {
	class Class
	what  string
	anyOf [][]string
	// skip lists engine types (PD roles) the need does not apply to.
	skip []string
	// afterTraffic: the families appear only once requests ran (labelled
	// tokenizer counters and histograms have no series before that).
	afterTraffic bool
}

// progressFamilies are the alternative progress counters (engine_hang's
// and cold_start's need).
func progressFamilies() [][]string {
	return [][]string{{series.RealtimeTokensTotal}, {series.GenerationTokensTotal}, {series.NumRequestsTotal}}
}

// schedulerFamilies: an SGLang engine exposes at least one of them from
// its first stats log on, traffic or not.
var schedulerFamilies = []string{series.NumRunningReqs, series.NumQueueReqs, series.TokenUsage, series.GenThroughput}

// Detect implements Detector.
func (d *MetricsBlindDetector) Detect(w Window, now time.Time) []Finding {
	if w.Replica().Kind == KindGPU {
		return nil // a GPU's exporter is no SGLang server: the GPU detectors read it
	}
	c := d.cfg
	st := w.Scrape()
	r := w.Replica()
	if !st.Up {
		if (st.Reason.Unreachable() && !probeAnswers(st)) || st.ConsecutiveFailures < c.FailuresToReport {
			return nil // nothing answers: replica_down's or cold_start's
		}
		return []Finding{d.unusable(w, st)}
	}
	if r.Kind == "gateway" {
		return d.gatewayBlind(w, now) // its own families, judged once it routes traffic
	}
	start, from, ok := d.judgedRange(w, now)
	if !ok {
		return nil
	}
	has := func(name string) bool { return present(w, name, from, now) }

	// Seasoned: data older than the grace, so a partial first scrape of a
	// starting server is not mistaken for a missing family.
	seasoned := false
	for _, name := range append([]string{series.HTTPRequestsTotal}, schedulerFamilies...) {
		if hasPoints(w, Sel(name), from, now.Add(-c.Grace)) {
			seasoned = true
			break
		}
	}
	if !seasoned && now.Sub(start) < c.Range {
		return nil
	}

	type blindness struct {
		class   Class
		missing string
	}
	var blind []blindness
	anyScheduler := false
	for _, name := range schedulerFamilies {
		anyScheduler = anyScheduler || has(name)
	}
	if !anyScheduler {
		for _, n := range d.needs {
			blind = append(blind, blindness{n.class, "no SGLang scheduler family at all (" + strings.Join(schedulerFamilies, ", ") + ")"})
		}
	} else {
		traffic := d.sawTraffic(w, from, now)
		for _, n := range d.needs {
			if skipped(n.skip, r.EngineType) || (n.afterTraffic && !traffic) {
				continue
			}
			if satisfied(n.anyOf, has) {
				continue
			}
			blind = append(blind, blindness{n.class, n.what + ": none of " + alternatives(n.anyOf)})
		}
	}
	if len(blind) == 0 {
		return nil
	}

	f := finding(MetricsBlind, w, Warning, LayerTransport)
	var classes, lines []string
	for _, b := range blind {
		classes = append(classes, string(b.class))
		lines = append(lines, fmt.Sprintf("%s (%s)", b.class, b.missing))
		f.Evidence = append(f.Evidence, Evidence{Name: "blind: " + string(b.class) + " — needs " + b.missing, Value: 0,
			Threshold: "families found"})
	}
	f.Evidence = append([]Evidence{{Name: "detectors blind on this replica", Value: float64(len(blind))}}, f.Evidence...)
	f.Summary = fmt.Sprintf("Metrics blind: %s cannot see this replica (families missing from /metrics)", strings.Join(classes, ", "))
	f.Diagnosis = sentence(
		fmt.Sprintf("Scrape layer: /metrics answers, but for the last %s it lacked what these detectors need: %s.", ShortDuration(now.Sub(from).Round(time.Second)), strings.Join(lines, "; ")),
		"They will never page for this replica until that changes. Usual causes: an SGLang release older than the family (the retraction counter arrived in late 2025, the queue-time histogram in 2025-03, realtime_tokens_total in 2025), a proxy or relabelling rule that renames or drops families (the watchdog understands sglang: and the gateway's sglang_ re-rendering), or a scrape of the wrong port.",
		"Families that only exist with a feature on (LoRA, PD disaggregation, speculative decoding) are not counted.")
	f.Emergency = []string{
		"Curl /metrics on the pod directly and compare with what the watchdog scrapes: a difference means a proxy or relabelling in between.",
		"Check the server version and launch flags (--enable-metrics; on old releases --collect-tokens-histogram).",
		"Until fixed, watch this replica by hand for the blind classes (the runbook pages list the log lines to grep, e.g. \"KV cache pool is full. Retract requests.\").",
	}
	f.RootCause = []string{
		"Upgrade SGLang to a release that exposes the missing families, and pin a minimum version in the deployment.",
		"Remove the proxy's renaming or scrape the server directly; keep /metrics unmodified end to end.",
		"Add a deploy check that /metrics carries the families the watchdog needs (the watchdog's diagnose command shows them).",
	}
	return []Finding{f}
}

// unusable is the finding for a /metrics that answers, but with nothing
// the watchdog can read: an HTTP error, an HTML page, a truncated or
// oversized exposition, a redirect elsewhere. Something serves at the
// address, so this is not an outage page; but every detector is blind.
func (d *MetricsBlindDetector) unusable(w Window, st ScrapeState) Finding {
	f := finding(MetricsBlind, w, Warning, LayerTransport)
	var classes []string
	for _, n := range d.needs {
		classes = append(classes, string(n.class))
	}
	what, why, steps := unusableDiagnosis(st.Reason, st.Status)
	f.Evidence = []Evidence{
		{Name: "consecutive scrapes answered " + what, Value: float64(st.ConsecutiveFailures), Threshold: fmt.Sprintf(">= %d", d.cfg.FailuresToReport),
			Limit: float64(d.cfg.FailuresToReport), HasLimit: true},
		{Name: "detectors blind on this replica", Value: float64(len(classes))},
	}
	if st.Status != 0 {
		f.Evidence = append(f.Evidence, Evidence{Name: "HTTP status of /metrics", Value: float64(st.Status)})
	}
	f.Summary = "Metrics blind: /metrics answers " + what + " — every detector is blind on this replica"
	_, podText := podEvidence(w.Replica().Pod, st.LastAttempt)
	f.Diagnosis = sentence(
		"Scrape layer: /metrics answers "+what+". "+why,
		"Something answers at the address, so this is not reported as the replica being down; but no detector can see it: "+strings.Join(classes, ", ")+". A crash, a hang or a storm on this replica would go unpaged until its metrics are readable again.",
		podText,
		"Last error: "+st.Error+".")
	f.Emergency = append(steps,
		"Until fixed, watch this replica by hand: curl /health_generate on it (200 within seconds: the engine serves).")
	f.RootCause = []string{
		"Scrape the server directly (pod IP and its HTTP port, path /metrics), not through an ingress or an authenticating proxy.",
		"Add a deploy check that /metrics answers 200 with sglang:* families before the replica joins the fleet.",
	}
	return f
}

// unusableDiagnosis names what /metrics answered, why that usually happens,
// and the first steps.
func unusableDiagnosis(reason series.ScrapeFailure, status int) (what, why string, steps []string) {
	switch {
	case reason == series.FailureHTTPStatus && status == http.StatusNotFound:
		return "HTTP 404", "SGLang serves /metrics only when started with --enable-metrics (off by default), so the server most likely runs without it — or the target points at the wrong port or path (metrics are on the main HTTP port, default 30000).",
			[]string{
				"Check the launch flags for --enable-metrics; add it at the next rollout, or restart the replica with it after taking it out of rotation: a restart drops the requests it holds (the flag itself does not change serving behaviour).",
				"Check the target URL: main HTTP port (--port, default 30000), path /metrics; in gRPC mode the HTTP sidecar port (--grpc-http-sidecar-port).",
			}
	case reason == series.FailureHTTPStatus && (status == http.StatusUnauthorized || status == http.StatusForbidden):
		return fmt.Sprintf("HTTP %d", status), "An authenticating proxy or network policy in front of the server refuses the watchdog.",
			[]string{"Give the watchdog credentials for the proxy, or scrape the pod directly."}
	case reason == series.FailureHTTPStatus && (status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout):
		return fmt.Sprintf("HTTP %d", status), "A proxy or ingress in front of the server answers for it: its upstream does not answer or is marked unavailable. The replica behind it may well be down — the proxy hides that.",
			[]string{
				"Curl /metrics and /health_generate on the pod directly (kubectl port-forward) to tell the replica from the proxy.",
				"Check the proxy's upstream health and logs.",
			}
	case reason == series.FailureHTTPStatus:
		return fmt.Sprintf("HTTP %d", status), "The metrics handler (or a proxy in front of it) fails while the server may serve fine; if it persists, the server's metrics collection is broken (multiprocess metrics directory, a crashed collector).",
			[]string{
				"Curl /metrics on the pod directly and read the server log around a failing request (the traceback of the metrics handler).",
				"Check PROMETHEUS_MULTIPROC_DIR is writable and not full when the server runs several processes.",
			}
	case reason == series.FailureNotMetrics:
		return "an HTML page", "A login page or a proxy's error page answers instead of the exposition: an SSO/auth proxy, an ingress default backend, or the wrong service.",
			[]string{"Open the target URL in a browser or curl it: whose page is it? Point the target at the pod (or exempt /metrics from the login)."}
	case reason == series.FailureParse:
		return "an unreadable exposition", "The text does not parse: it is truncated (a proxy or the server cut the body) or it is not Prometheus text.",
			[]string{"Curl /metrics twice and compare the ends: a body that stops mid-line is cut by a proxy (timeouts, buffer limits) or by the server."}
	case reason == series.FailureRedirect:
		return "a redirect to another host", "The watchdog follows redirects only on the target's own host, so its requests (and any credentials in the target URL) never reach another host; a login redirect usually means an authenticating proxy.",
			[]string{"Curl -v the target URL to see where it redirects; scrape the pod directly or exempt /metrics from the login."}
	case reason == series.FailureTimeout:
		return "nothing before the scrape timeout", "Yet the replica answers its health probe (/health_generate generates a token), so it serves: its metrics endpoint is too slow (a huge exposition, a stuck collector) or something between the watchdog and /metrics drops the request.",
			[]string{
				"Time a curl of /metrics on the pod directly and compare with scrape.timeout; count its series (label fan-out makes it slow).",
				"Check for a proxy or network policy between the watchdog and the pod's metrics port.",
			}
	case reason == series.FailureTooLarge || reason == series.FailureTooManySeries:
		return "more than the watchdog's limits", "The exposition exceeds the scrape limits — usually label fan-out (--enable-metrics-for-all-schedulers with many ranks, custom labels, per-priority series).",
			[]string{"Curl /metrics and count series per family to find the fan-out; reduce it, or raise scrape.max_series / max_body_bytes deliberately."}
	}
	return "an error (" + string(reason) + ")", "The scrape reaches something but fails (TLS, a bad URL): the target configuration or the proxy in front is wrong.",
		[]string{"Curl the target URL from the watchdog's pod with the same scheme and check TLS and the path."}
}

// sawTraffic reports whether the replica did any work in the range.
func (d *MetricsBlindDetector) sawTraffic(w Window, from, now time.Time) bool {
	if v, ok := w.Max(Sel(series.NumRunningReqs), from, now); ok && v > 0 {
		return true
	}
	for _, sel := range []Selector{
		Sel(series.RealtimeTokensTotal), Sel(series.NumRequestsTotal), Sel(series.PromptTokensTotal),
		inference(series.HTTPRequestsTotal, DefaultInferenceEndpoints),
	} {
		if inc, ok := w.Increase(sel, from, now); ok && inc > 0 {
			return true
		}
	}
	return false
}

func skipped(engineTypes []string, t string) bool {
	for _, s := range engineTypes {
		if s == t {
			return true
		}
	}
	return false
}

func satisfied(anyOf [][]string, has func(string) bool) bool {
	for _, all := range anyOf {
		ok := true
		for _, name := range all {
			ok = ok && has(name)
		}
		if ok {
			return true
		}
	}
	return false
}

func alternatives(anyOf [][]string) string {
	var alts []string
	for _, all := range anyOf {
		alts = append(alts, strings.Join(all, " + "))
	}
	return strings.Join(alts, ", ")
}

// MetricsBlindConfig tunes the detector of targets whose exposition lacks
// what the detectors need.
type MetricsBlindConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Grace after a replica is first seen or restarts: a starting server's
	// first scrapes may be partial.
	Grace time.Duration `yaml:"grace" doc:"no verdict this long after a replica is first seen or restarts"`
	// Range: a family counts as missing when it had no value in the whole
	// range (or since the start, when younger).
	Range time.Duration `yaml:"range" doc:"a family is missing when it had no value in the whole range"`
	// FailuresToReport is how many consecutive unusable answers of /metrics
	// (an HTTP error, an HTML page, a truncated exposition) make the target
	// blind.
	FailuresToReport int `yaml:"failures_to_report" doc:"consecutive unusable answers of /metrics: blind"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (MetricsBlindConfig) defaults() MetricsBlindConfig {
	return MetricsBlindConfig{
		Enabled:          true,
		Grace:            2 * time.Minute,
		Range:            10 * time.Minute,
		FailuresToReport: 2,
	}
}

// The methods below make MetricsBlindConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c MetricsBlindConfig) class() Class                 { return MetricsBlind }
func (c MetricsBlindConfig) enabled() bool                { return c.Enabled }
func (c MetricsBlindConfig) disabled() MetricsBlindConfig { c.Enabled = false; return c }
func (c MetricsBlindConfig) usesTriage() bool             { return false }
func (c MetricsBlindConfig) needs() []need {
	return nil // it is the one that reports missing families
}
func (c MetricsBlindConfig) reads() []string {
	// Besides these, it asks for the families of the other detectors'
	// needs, which their own reads declare.
	return append(append(append(append([]string(nil), schedulerFamilies...), progressReads()...),
		gatewayClientFamilies...), gatewayWorkFamilies...)
}
func (c MetricsBlindConfig) lookback() time.Duration {
	return c.Range
}

func (c MetricsBlindConfig) build(env buildEnv) Detector {
	return &MetricsBlindDetector{cfg: c, needs: env.needs}
}

func (c MetricsBlindConfig) oneShot(lookback time.Duration, samples int) (MetricsBlindConfig, OneShot) {
	c.Range = lookback
	return c, OneShot{Judged: true, Note: "partly: a 404 on /metrics is judged; missing families need the daemon's grace period after a start"}
}

func (c MetricsBlindConfig) validate(e *configErrors) {
	e.check(c.Grace >= 0, "grace", "must not be negative, got %s", c.Grace)
	e.positiveDuration("range", c.Range)
	e.check(c.FailuresToReport >= 1, "failures_to_report", "must be at least 1, got %d", c.FailuresToReport)
}

// severities lists what its findings can carry; its runbook describes each.
func (c MetricsBlindConfig) severities() []Severity { return []Severity{Warning} }

// position: off the chain; what it explains (replica_down's scrape
// failure) is declared there.
func (c MetricsBlindConfig) position(Finding) position { return position{} }

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c MetricsBlindConfig) doc() doc {
	return doc{
		name:     "Metrics blind",
		means:    "the watchdog cannot see: `/metrics` answers unusably (404 without `--enable-metrics`, 5xx, an HTML login page, a truncated body, a redirect to another host) or needed families are missing",
		signals:  "says which detectors are blind and why — a broken metrics endpoint on a serving replica is never `replica_down`",
		settings: "The exposition lacks what detectors need (--enable-metrics off, renamed families).",
	}
}
