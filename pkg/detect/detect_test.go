package detect_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func fnd(c detect.Class, l detect.Layer) detect.Finding {
	return detect.Finding{Class: c, Layer: l, Replica: "r"}
}

var (
	collapsePrompt   = fnd(detect.CacheCollapse, detect.LayerPrefill)
	collapseEviction = fnd(detect.CacheCollapse, detect.LayerMemory)
	kvSat            = fnd(detect.KVSaturation, detect.LayerMemory)
	storm            = fnd(detect.PreemptStorm, detect.LayerMemory)
	queueLat         = fnd(detect.QueueLatency, detect.LayerQueue)
	prefillLat       = fnd(detect.QueueLatency, detect.LayerPrefill)
	decodeSlow       = fnd(detect.DecodeSlowdown, detect.LayerDecode)
	avalanche        = fnd(detect.RetryAvalanche, detect.LayerClient)
	hang             = fnd(detect.EngineHang, detect.LayerProcess)
	lora             = fnd(detect.LoraThrash, detect.LayerDecode)
	pdFail           = fnd(detect.PDTransferFailure, detect.LayerTransfer)
	cold             = fnd(detect.ColdStart, detect.LayerProcess)
	restart          = fnd(detect.ReplicaDown, detect.LayerProcess)
	down404          = fnd(detect.ReplicaDown, detect.LayerTransport)
	blind            = fnd(detect.MetricsBlind, detect.LayerTransport)
)

func TestExplains(t *testing.T) {
	tests := []struct {
		name          string
		cause, effect detect.Finding
		want          bool
	}{
		// The chain, link by link: cache collapse -> KV pressure ->
		// retractions -> queue growth/latency -> client timeouts -> retries.
		{"collapse -> KV pressure", collapsePrompt, kvSat, true},
		{"retractions name the KV pressure they come with", storm, kvSat, true},
		{"KV pressure -/-> retractions", kvSat, storm, false},
		{"retractions -> queue latency", storm, queueLat, true},
		{"retractions -> decode slowdown", storm, decodeSlow, true},
		{"retry avalanche -> queue latency (the loop is what to break)", avalanche, queueLat, true},
		{"queue latency -/-> retry avalanche", queueLat, avalanche, false},
		{"decode slowdown -> queue latency", decodeSlow, queueLat, true},
		// Skipped links: the intermediate finding need not be firing.
		{"collapse -> retractions (existing)", collapsePrompt, storm, true},
		{"collapse -> retry avalanche (existing)", collapsePrompt, avalanche, true},
		{"eviction collapse -> retry avalanche (existing)", collapseEviction, avalanche, true},
		{"retractions -> retry avalanche (existing)", storm, avalanche, true},
		{"KV pressure -> prefill-side latency", kvSat, prefillLat, true},
		{"collapse -> prefill-side latency", collapsePrompt, prefillLat, true},
		// An eviction-driven collapse sits after the pressure (existing).
		{"retractions -> eviction collapse (existing)", storm, collapseEviction, true},
		{"KV pressure -> eviction collapse", kvSat, collapseEviction, true},
		{"eviction collapse -/-> retractions (existing)", collapseEviction, storm, false},
		{"eviction collapse -/-> KV pressure", collapseEviction, kvSat, false},
		{"eviction collapse -> queue latency", collapseEviction, queueLat, true},
		// Never backwards.
		{"retractions -/-> prompt collapse (existing)", storm, collapsePrompt, false},
		{"retry avalanche -/-> retractions", avalanche, storm, false},
		{"queue latency -/-> retractions", queueLat, storm, false},
		{"queue latency -/-> decode slowdown", queueLat, decodeSlow, false},
		{"KV pressure -/-> prompt collapse", kvSat, collapsePrompt, false},
		// Off the chain.
		{"hang -> frozen KV gauges", hang, kvSat, true},
		{"hang -> latency", hang, queueLat, true},
		{"hang -> retries", hang, avalanche, true},
		{"hang -/-> retractions", hang, storm, false},
		{"LoRA thrash -> decode slowdown", lora, decodeSlow, true},
		{"PD failures -> queue latency", pdFail, queueLat, true},
		{"cold start -> retries", cold, avalanche, true},
		{"restart -> cold start", restart, cold, true},
		{"scrape failure -/-> cold start", down404, cold, false},
		{"404 -> replica_down's scrape failure", blind, down404, true},
		{"404 -/-> restart", blind, restart, false},
		{"restart -/-> cache collapse (existing)", restart, collapsePrompt, false},
		{"restart -> slow first tokens", restart, queueLat, true},
		{"scrape failure -/-> queue latency", down404, queueLat, false},
		{"latency -/-> hang", queueLat, hang, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := detect.Explains(tt.cause, tt.effect); got != tt.want {
				t.Errorf("Explains(%s/%s, %s/%s) = %v, want %v", tt.cause.Class, tt.cause.Layer, tt.effect.Class, tt.effect.Layer, got, tt.want)
			}
		})
	}
}

// Grouping by Explains must always find a root: no finding explains
// itself and no two findings explain each other, directly or round a cycle.
func TestExplainsIsAcyclic(t *testing.T) {
	all := []detect.Finding{collapsePrompt, collapseEviction, kvSat, storm, queueLat, prefillLat, decodeSlow,
		avalanche, hang, lora, pdFail, cold, restart, down404, blind, fnd(detect.ErrorRate, detect.LayerQueue)}
	n := len(all)
	reach := make([][]bool, n)
	for i := range all {
		reach[i] = make([]bool, n)
		for j := range all {
			reach[i][j] = detect.Explains(all[i], all[j])
		}
	}
	for k := 0; k < n; k++ {
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				reach[i][j] = reach[i][j] || (reach[i][k] && reach[k][j])
			}
		}
	}
	for i := range all {
		if reach[i][i] {
			t.Errorf("%s/%s explains itself through a cycle", all[i].Class, all[i].Layer)
		}
	}
}

// The seeds' third worked scenario: the hit rate falls with unchanged
// inputs (the prompt token rate is steady) and normal KV usage: the
// diagnosis points at the prompt content or page-size alignment, not at
// eviction.
func TestCacheCollapseSeedScenarioNotEviction(t *testing.T) {
	s := fullEngine().with(hitRateChange(incidentLong, 0.25)...)
	f := one(t, run(t, s, detect.CacheCollapse))
	if f.Layer != detect.LayerPrefill {
		t.Errorf("layer = %s, want prefill", f.Layer)
	}
	tokens := evidenceNamed(t, f, "prompt tokens in range")
	// 10,000 prompt tokens/s throughout: the range's scrapes span 295 s,
	// the baseline's 3595 s.
	if !approx(tokens.Value/295, 10000, 1e-6) || !approx(tokens.Baseline/3595, 10000, 1e-6) {
		t.Errorf("prompt token evidence = %+v; want a steady 10k tokens/s", tokens)
	}
	if kv := evidenceNamed(t, f, "KV cache usage"); kv.Value != 0.5 {
		t.Errorf("KV evidence = %+v", kv)
	}
	contains(t, "diagnosis", f.Diagnosis, "prompts most likely stopped sharing prefixes", "timestamp", "chat template", "page boundaries", "page size 16 tokens")
	if strings.Contains(f.Diagnosis, "evicted under memory pressure") || strings.Contains(f.Diagnosis, "memory-pressure") {
		t.Errorf("a prompt-side collapse is blamed on eviction: %s", f.Diagnosis)
	}
	if detect.Explains(fnd(detect.PreemptStorm, detect.LayerMemory), f) {
		t.Error("a prompt-side collapse must not be explained by retractions")
	}
	// No KV pressure, no storm: only the collapse pages.
	none(t, run(t, s, detect.KVSaturation))
	none(t, run(t, s, detect.PreemptStorm))
}

// Every new class runs through New, has a runbook path and appears in the
// default config.
func TestNewClassesAreWired(t *testing.T) {
	ds, err := detect.New(detect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	got := map[detect.Class]bool{}
	for _, d := range ds {
		got[d.Class()] = true
	}
	for _, c := range []detect.Class{detect.KVSaturation, detect.EngineHang, detect.QueueLatency, detect.DecodeSlowdown,
		detect.ColdStart, detect.LoraThrash, detect.PDTransferFailure, detect.MetricsBlind} {
		if !got[c] {
			t.Errorf("%s not built by New", c)
		}
		if detect.RunbookPath(c) != "/runbooks/"+string(c) {
			t.Errorf("runbook path of %s = %s", c, detect.RunbookPath(c))
		}
	}
	// The harness' replica has the canonical names the detectors read.
	if series.NumRunningReqs != "sglang:num_running_reqs" {
		t.Fatal("canonical names changed")
	}
}

// An incident's worst value is its minimum for a rule that fires below a
// limit and for a hit rate, its maximum otherwise: the resolve's "lowest",
// the postmortem's Worst column and the tracker's worst values read it.
func TestEvidenceLowerIsWorse(t *testing.T) {
	for _, tt := range []struct {
		e    detect.Evidence
		want bool
	}{
		{detect.Evidence{Name: "prefix cache hit rate (prefill_effective_tokens_total *_hit / all)", Threshold: "open until >= 0.8x the baseline"}, true},
		{detect.Evidence{Name: "generation throughput", Threshold: "<= 0.5x baseline"}, true},
		{detect.Evidence{Name: "tokens processed", Threshold: " ≤ 0"}, true},
		{detect.Evidence{Name: "queued requests", Threshold: ">= 2x baseline"}, false},
		{detect.Evidence{Name: "retracted requests/s"}, false},
	} {
		if got := tt.e.LowerIsWorse(); got != tt.want {
			t.Errorf("%q (rule %q): LowerIsWorse = %v, want %v", tt.e.Name, tt.e.Threshold, got, tt.want)
		}
	}
}

// Durations on pages and in docs read as configured; one measured between
// scrapes is rounded to a tenth of a second, not printed to the nanosecond.
func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		2 * time.Minute: "2m", time.Hour: "1h", 150 * time.Second: "2m30s", 2500 * time.Millisecond: "2.5s",
		200 * time.Millisecond: "200ms", 12503623485: "12.5s",
	} {
		if got := detect.ShortDuration(d); got != want {
			t.Errorf("ShortDuration(%d) = %q, want %q", d, got, want)
		}
	}
}
