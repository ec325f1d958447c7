package detect

import (
	"fmt"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// PDTransferFailure is the class of failing KV bootstrap and transfers
// between PD-disaggregated prefill and decode.
const PDTransferFailure Class = "pd_transfer_failure"

// PDTransferFailureDetector pages, in prefill/decode disaggregation, when
// requests fail to hand their KV cache over from the prefill to the decode
// server: bootstrap failures (the two sides could not set up the transfer)
// or transfer failures (the KV transfer backend failed mid-way). Replicas
// without the PD counters (disaggregation off) are not looked at. A
// gateway's smg_pd_* failure counters are read the same way.
type PDTransferFailureDetector struct{ cfg PDTransferFailureConfig }

// Class implements Detector.
func (d *PDTransferFailureDetector) Class() Class { return PDTransferFailure }

// Baselines keys of pd_transfer_failure: failed hand-overs per second, in
// all and by kind.
const (
	pdFailures          = "failures_per_second"
	pdBootstrapFailures = "bootstrap_failures_per_second"
	pdTransferFailures  = "transfer_failures_per_second"
)

// Detect implements Detector.
//
// Clear rule while frozen: an incident's finding persists while its onset
// rule holds against the rate frozen at its onset — failed hand-overs at
// MinFailuresPerSecond (the absolute floor) and BaselineRatio times the
// frozen rate. One its floor alone decided (no baseline at its onset)
// stays judged by the floor alone (NoBaseline). A young replica is judged
// by the floor, never by its peers: failing hand-overs are failing
// requests, whatever the peers do.
func (d *PDTransferFailureDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	p := newPeriods(now, c.Range, c.Baseline)
	bootstrapName, transferName := series.BootstrapFailedTotal, series.TransferFailedTotal
	if !w.Has(bootstrapName) && !w.Has(transferName) {
		bootstrapName, transferName = gatewayPDBootstrapFail, gatewayPDTransferFail
	}
	bootstrap := p.rate(w, Sel(bootstrapName))
	transfer := p.rate(w, Sel(transferName))
	total := sum(bootstrap, transfer)
	if !total.nowOK || total.now < c.MinFailuresPerSecond {
		return nil
	}
	cmp := comparisonOf(w, PDTransferFailure)
	switch {
	case cmp.floorOnly():
		forgetBaseline(&bootstrap, &transfer, &total)
	case cmp.frozen(pdFailures):
		cmp.onto(pdFailures, &total)
		cmp.onto(pdBootstrapFailures, &bootstrap)
		cmp.onto(pdTransferFailures, &transfer)
	case !p.requestBaselineReady(w, c.BaselineCoverage, Sel(bootstrapName)) && !p.requestBaselineReady(w, c.BaselineCoverage, Sel(transferName)):
		// A young replica: the absolute floor decides.
		forgetBaseline(&bootstrap, &transfer, &total)
	}
	if total.baseOK && !atLeastTimes(total.now, total.base, c.BaselineRatio) {
		return nil
	}

	finished := p.rate(w, Sel(series.NumRequestsTotal))
	share := 0.0
	shareOK := false
	if finished.nowOK {
		share, shareOK = ratio(total.now, total.now+finished.now)
	}
	sev := Warning
	if shareOK && share >= c.CriticalFailureShare {
		sev = Critical
	}
	f := finding(PDTransferFailure, w, sev, LayerTransfer)
	kept := levelSet{}
	kept.base(pdFailures, total)
	if _, ok := kept[pdFailures]; ok {
		kept.base(pdBootstrapFailures, bootstrap)
		kept.base(pdTransferFailures, transfer)
	} else {
		kept[NoBaseline] = 1
	}
	f.Baselines = kept.orNil()
	f.Evidence = append(f.Evidence, total.evidence("failed KV hand-overs/s (bootstrap + transfer)", "/s",
		fmt.Sprintf(">= %s/s and >= %sx baseline", num(c.MinFailuresPerSecond), num(c.BaselineRatio))).WithLimit(floorOrTimesBase(total, c.MinFailuresPerSecond, c.BaselineRatio)))
	if bootstrap.nowOK {
		f.Evidence = append(f.Evidence, bootstrap.evidence("bootstrap failures/s ("+bootstrapName+")", "/s", ""))
	}
	if transfer.nowOK {
		f.Evidence = append(f.Evidence, transfer.evidence("transfer failures/s ("+transferName+")", "/s", ""))
	}
	if shareOK {
		f.Evidence = append(f.Evidence, Evidence{Name: "share of requests failing the hand-over", Value: share, Unit: "ratio",
			Threshold: fmt.Sprintf(">= %s for critical", pct(c.CriticalFailureShare))})
	}
	for _, q := range []struct{ name, label string }{
		{prefillBootstrapQueue, "prefill bootstrap queue"},
		{decodeTransferQueue, "decode transfer queue"},
	} {
		if v, ok := w.Last(Sel(q.name)); ok {
			f.Evidence = append(f.Evidence, Evidence{Name: q.label + " (requests)", Value: v})
		}
	}

	var which []string
	bootstrapMain := bootstrap.nowOK && (!transfer.nowOK || bootstrap.now >= transfer.now)
	if bootstrap.nowOK && bootstrap.now > 0 {
		which = append(which, fmt.Sprintf("bootstrap failures %s", vsBaseline(bootstrap, "/s")))
	}
	if transfer.nowOK && transfer.now > 0 {
		which = append(which, fmt.Sprintf("transfer failures %s", vsBaseline(transfer, "/s")))
	}
	where := "this replica"
	if role := w.Replica().EngineType; role == "prefill" || role == "decode" {
		where = "this " + role + " server"
	}
	f.Summary = fmt.Sprintf("PD KV transfer failing: %s failed hand-overs/s%s", num(total.now), baselineClause(total.evidence("", "", ""), "/s"))
	var cause string
	if bootstrapMain {
		cause = "Mostly bootstrap failures: the decode side could not set up the transfer with the prefill server — the bootstrap port (--disaggregation-bootstrap-port, default 8998) unreachable or blocked, a prefill server that restarted, or mismatched disaggregation settings between the two sides."
	} else {
		cause = "Mostly transfer failures: the KV transfer backend (--disaggregation-transfer-backend: mooncake, nixl) fails while moving the cache — RDMA/InfiniBand link errors, a wrong NIC (--disaggregation-ib-device), memory registration failures or timeouts under load."
	}
	f.Diagnosis = sentence(
		fmt.Sprintf("KV transfer layer: on %s, requests fail to hand their KV cache over between prefill and decode (%s).", where, strings.Join(which, ", ")),
		cause,
		"Each failed hand-over is a failed or retried request, and the prefill work is lost.")
	f.Emergency = []string{
		"Check the prefill and decode servers of the pair are both up and were not restarted; remove a failing pair from the router.",
		"Check connectivity between the prefill and decode nodes on the bootstrap port and the transfer network (RDMA: ibstat / ibv_devinfo; firewall rules).",
		"Read both sides' logs around the failures for the transfer backend's error (mooncake / nixl).",
	}
	f.RootCause = []string{
		"Pin the transfer network: the right IB device per GPU (--disaggregation-ib-device), consistent MTU, no firewall between prefill and decode nodes on the bootstrap and transfer ports.",
		"Keep the KV transfer backend and its library versions identical on both sides; upgrade together.",
		"Alert on the bootstrap/transfer queues (num_prefill_bootstrap_queue_reqs, num_decode_transfer_queue_reqs) to catch a stuck pair before requests fail.",
	}
	return []Finding{f}
}

// PDTransferFailureConfig tunes the PD-disaggregation KV transfer failure
// detector.
type PDTransferFailureConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is the recent window failure rates are read over.
	Range time.Duration `yaml:"range" doc:"recent window failure rates are read over"`
	// Baseline is the window just before Range that "normal" is taken from.
	Baseline time.Duration `yaml:"baseline" doc:"the \"normal\" window just before it"`
	// MinFailuresPerSecond is the absolute floor (bootstrap + transfer
	// failures).
	MinFailuresPerSecond float64 `yaml:"min_failures_per_second" doc:"absolute floor (bootstrap + transfer failures)"`
	// BaselineRatio: failures per second at least this many times the
	// baseline.
	BaselineRatio float64 `yaml:"baseline_ratio" doc:"and at least this many times the baseline rate"`
	// CriticalFailureShare: failures over (failures + finished requests)
	// at or above it make the finding critical.
	CriticalFailureShare float64 `yaml:"critical_failure_share" doc:"failures over failures plus finished requests: critical"`
	// BaselineCoverage is what the baseline must hold before a ratio to
	// it counts (see BaselineCoverage).
	BaselineCoverage BaselineCoverage `yaml:"baseline_coverage" doc:"before any ratio to the baseline counts, the baseline"`
}

// defaults are the production settings, tuned for a 5 s scrape interval.
func (PDTransferFailureConfig) defaults() PDTransferFailureConfig {
	return PDTransferFailureConfig{
		Enabled:              true,
		Range:                2 * time.Minute,
		Baseline:             time.Hour,
		MinFailuresPerSecond: 0.05, // 6 failed hand-overs in 2 minutes
		BaselineRatio:        3,
		CriticalFailureShare: 0.1,
		BaselineCoverage:     DefaultBaselineCoverage(),
	}
}

// The methods below make PDTransferFailureConfig a registry entry (settings, in
// registry.go): look-back, needed families, one-shot behaviour, constructor
// and validation.
func (c PDTransferFailureConfig) class() Class                      { return PDTransferFailure }
func (c PDTransferFailureConfig) enabled() bool                     { return c.Enabled }
func (c PDTransferFailureConfig) disabled() PDTransferFailureConfig { c.Enabled = false; return c }
func (c PDTransferFailureConfig) usesTriage() bool                  { return false }
func (c PDTransferFailureConfig) needs() []need {
	return nil // PD families exist only with disaggregation on, so they are never a core need
}
func (c PDTransferFailureConfig) reads() []string {
	return []string{series.BootstrapFailedTotal, series.TransferFailedTotal, series.NumRequestsTotal,
		gatewayPDBootstrapFail, gatewayPDTransferFail, prefillBootstrapQueue, decodeTransferQueue}
}
func (c PDTransferFailureConfig) lookback() time.Duration {
	return c.Range + c.Baseline
}

func (c PDTransferFailureConfig) build(env buildEnv) Detector {
	return &PDTransferFailureDetector{cfg: c}
}

func (c PDTransferFailureConfig) oneShot(lookback time.Duration, samples int) (PDTransferFailureConfig, OneShot) {
	c.Range, c.Baseline = lookback, lookback
	return c, OneShot{Judged: true, Note: "judged on its absolute failure-rate floor; the baseline ratio needs history"}
}

func (c PDTransferFailureConfig) validate(e *configErrors) {
	c.BaselineCoverage.validate(e)
	e.positiveDuration("range", c.Range)
	e.positiveDuration("baseline", c.Baseline)
	e.positive("min_failures_per_second", c.MinFailuresPerSecond)
	e.atLeastOne("baseline_ratio", c.BaselineRatio)
	e.fraction("critical_failure_share", c.CriticalFailureShare)
}

// severities lists what its findings can carry; its runbook describes each.
func (c PDTransferFailureConfig) severities() []Severity { return []Severity{Warning, Critical} }

// position: off the chain, failing transfers hold requests in the queue,
// and clients retry and fail.
func (c PDTransferFailureConfig) position(Finding) position {
	return position{explains: []Class{QueueLatency, RetryAvalanche, ErrorRate}}
}

// doc describes the detector: its row in the README's class table and
// the comment over its section of configs/watchdog.yaml.
func (c PDTransferFailureConfig) doc() doc {
	return doc{
		name:     "PD transfer failure",
		means:    "P/D disaggregation KV transfer/bootstrap failures",
		signals:  "`sglang:num_{bootstrap,transfer}_failed_reqs_total`",
		settings: "P/D disaggregation bootstrap and KV transfer failures.",
	}
}
