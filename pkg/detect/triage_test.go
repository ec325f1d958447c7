package detect_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// triageOf runs the package-level Triage on the scenario's replica.
func triageOf(t *testing.T, s *scenario) detect.TriageResult {
	t.Helper()
	store, now := s.run(t, detect.DefaultConfig())
	var tr detect.TriageResult
	if !store.View(s.target, func(w detect.Window) { tr = detect.DefaultConfig().Triage.Classify(w, now, detect.LatencyToJudge) }) {
		t.Fatal("replica not in the store")
	}
	return tr
}

func TestTriageTable(t *testing.T) {
	slowTTFT := hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incident, 0.3, 2.8))
	tests := []struct {
		name     string
		scenario *scenario
		verdict  detect.TriageVerdict
		layer    detect.Layer
		next     string
	}{
		// The runbook's snapshot: 8 running, 47 waiting, KV 0.91.
		{"below the most it ran, many waiting, KV full: admission blocked by memory", fullEngine().with(
			gauge(series.NumRunningReqs, stepAt(incident, 40, 8)),
			gauge(series.NumQueueReqs, stepAt(incident, 2, 47)),
			gauge(series.TokenUsage, stepAt(incident, 0.5, 0.91)),
			gauge(series.FullTokenUsage, stepAt(incident, 0.5, 0.91)), slowTTFT),
			detect.TriageAdmission, detect.LayerMemory, "KV memory"},
		{"below the most it ran, many waiting, room left: admission bottleneck", fullEngine().with(
			gauge(series.NumRunningReqs, stepAt(incident, 40, 8)),
			gauge(series.NumQueueReqs, stepAt(incident, 2, 47)), slowTTFT),
			detect.TriageAdmission, detect.LayerQueue, "--max-running-requests"},
		{"at the most it ran, many waiting: saturated but working", fullEngine().with(
			gauge(series.NumQueueReqs, stepAt(incident, 2, 60)), slowTTFT),
			detect.TriageSaturated, detect.LayerQueue, "add replicas"},
		{"near the most it ran, few waiting, latency high: single-request execution", fullEngine().with(slowTTFT),
			detect.TriageExecution, "", "rid"},
		{"few waiting, latency normal: no pressure", fullEngine(), detect.TriageNoPressure, "", "nothing to triage"},
		// At the highest count seen with the KV pool full: the batch cannot
		// grow, nothing waits.
		{"at the most it ran with the KV pool full, few waiting: full batch", fullEngine().with(
			gauge(series.NumRunningReqs, constant(256)),
			gauge(series.TokenUsage, constant(0.95)),
			gauge(series.FullTokenUsage, constant(0.95))),
			detect.TriageFullBatch, detect.LayerDecode, "batch"},
		// The configured cap (2024 prototype gauge) decides "running high".
		{"configured cap: far below it", fullEngine().with(gauge("sglang:max_running_requests", constant(256)), slowTTFT),
			detect.TriageExecution, "", "profile"},
		{"configured cap: at it", fullEngine().with(gauge("sglang:max_running_requests", constant(256)),
			gauge(series.NumRunningReqs, constant(250))),
			detect.TriageFullBatch, detect.LayerDecode, "--max-running-requests"},
		{"gauges not exposed", fullEngine().without(series.NumRunningReqs), detect.TriageUnknown, "", "by hand"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := triageOf(t, tt.scenario)
			labelAgrees(t, tr)
			wantVerdict(t, tr, tt.verdict, tt.layer)
			if !strings.Contains(tr.NextStep, tt.next) || !strings.Contains(tr.String(), "Next step: ") {
				t.Errorf("next step lacks %q: %s", tt.next, tr)
			}
		})
	}
}

func TestTriageNumbers(t *testing.T) {
	tr := triageOf(t, fullEngine().with(
		gauge(series.NumRunningReqs, stepAt(incident, 40, 8)),
		gauge(series.NumQueueReqs, stepAt(incident, 2, 47))))
	if tr.Running != 8 || tr.Queued != 47 || tr.Capacity != 40 || !tr.WaitingHigh || tr.RunningHigh {
		t.Errorf("triage = %+v", tr)
	}
	contains(t, "triage line", tr.String(), "admission bottleneck (running below the most it ran, cap not exposed, many waiting, KV room left)",
		"8 running (the most in the last 1h: 40; the cap is not exposed)", "47 queued")
	if strings.Contains(tr.String(), "n/a") {
		t.Errorf("triage line prints n/a: %s", tr)
	}
	if ev := tr.Evidence(); len(ev) != 2 || ev[0].Value != 8 || ev[0].Baseline != 40 || ev[1].Value != 47 {
		t.Errorf("evidence = %+v", ev)
	}
}

// The existing latency-type findings carry the triage too.
func TestTriageOnPreemptStormAndCacheCollapse(t *testing.T) {
	f := one(t, run(t, preemptStorm(2), detect.PreemptStorm))
	// 40 running (its most), 60 queued, KV full.
	withTriage(t, f, detect.TriageSaturated)
	c := one(t, run(t, runbookSnapshot(), detect.CacheCollapse))
	withTriage(t, c, detect.TriageAdmission)
	contains(t, "triage", c.Triage, "KV memory")
}

// kvFullInBursts is a KV pool that hits 100% every third scrape during a
// storm and drains to 30% between the retractions: its average over the
// triage minute is about 0.53, its highest value 1.
func kvFullInBursts(el time.Duration) float64 {
	if el < incident {
		return 0.5
	}
	if (el/(5*time.Second))%3 == 0 {
		return 1
	}
	return 0.3
}

// The triage reads KV usage as the preemption detector does (the highest
// value in the range on the fullest rank). A storm whose pool fills in
// bursts is admission blocked by KV memory, never "the scheduler leaves
// room unused", which would send on-call to raise --max-running-requests.
func TestTriageAgreesWithKVFullStorm(t *testing.T) {
	s := preemptStorm(2).with(
		gauge(series.NumRunningReqs, stepAt(incident, 40, 8)),
		gauge(series.NumQueueReqs, stepAt(incident, 2, 60)),
		gauge(series.TokenUsage, kvFullInBursts),
		gauge(series.FullTokenUsage, kvFullInBursts))
	f := one(t, run(t, s, detect.PreemptStorm))
	if kv := evidenceNamed(t, f, "KV cache usage"); kv.Value < 0.99 {
		t.Fatalf("the storm's own evidence should say the pool filled: %+v", kv)
	}
	tr := triageOf(t, s)
	for what, got := range map[string]string{"Triage": tr.String(), "the finding's triage": f.Triage} {
		if strings.Contains(got, "leaves room unused") {
			t.Errorf("%s contradicts a full KV pool: %s", what, got)
		}
		contains(t, what, got, "admission is blocked by KV memory", "KV cache usage up to 100%")
	}
	if tr.Verdict != detect.TriageAdmission || tr.Layer != detect.LayerMemory || tr.KVUsage != 1 {
		t.Errorf("verdict %s layer %s KV %v, want admission_bottleneck in kv_memory at KV 1", tr.Verdict, tr.Layer, tr.KVUsage)
	}
	if f.TriageVerdict != tr.Verdict {
		t.Errorf("finding verdict %s, Triage %s", f.TriageVerdict, tr.Verdict)
	}

	// The same replica at its cap: saturated, and told not to raise the cap
	// into a full pool.
	sat := triageOf(t, s.with(gauge(series.NumRunningReqs, constant(40))))
	if sat.Verdict != detect.TriageSaturated || !strings.Contains(sat.NextStep, "do not raise --max-running-requests") {
		t.Errorf("saturated with a full pool: %s", sat)
	}
}

// The triage is a page line of its own: a finding's diagnosis does not
// repeat it, and its numbers are not added to the evidence a second time.
func TestTriageIsNotRepeatedInDiagnosisOrEvidence(t *testing.T) {
	for _, tc := range []struct {
		s     *scenario
		class detect.Class
	}{{preemptStorm(2), detect.PreemptStorm}, {runbookSnapshot(), detect.CacheCollapse}} {
		f := one(t, run(t, tc.s, tc.class))
		if f.Triage == "" {
			t.Fatalf("%s carries no triage", tc.class)
		}
		if strings.Contains(f.Diagnosis, "Layer triage") || strings.Contains(f.Diagnosis, f.Triage) {
			t.Errorf("%s diagnosis repeats the triage: %s", tc.class, f.Diagnosis)
		}
		for _, e := range f.Evidence {
			if strings.HasPrefix(e.Name, "triage:") {
				t.Errorf("%s evidence repeats the triage numbers: %+v", tc.class, e)
			}
		}
	}
}

// wantVerdict checks the triage's verdict and layer.
func wantVerdict(t *testing.T, tr detect.TriageResult, verdict detect.TriageVerdict, layer detect.Layer) {
	t.Helper()
	if tr.Verdict != verdict || tr.Layer != layer {
		t.Errorf("verdict %s layer %q, want %s %q: %s", tr.Verdict, tr.Layer, verdict, layer, tr)
	}
}

// labelAgrees checks that every fact the label states is what the numbers
// it prints say, by the default settings' rules.
func labelAgrees(t *testing.T, tr detect.TriageResult) {
	t.Helper()
	c := detect.DefaultConfig().Triage
	label := tr.Label()
	atCap := tr.Capacity > 0 && tr.Running >= c.RunningHighFraction*tr.Capacity && tr.Running >= c.MinRunning
	for fact, holds := range map[string]bool{
		"running at its cap":         tr.CapacityKnown && atCap,
		"running at the most it ran": !tr.CapacityKnown && atCap,
		"running near the most":      !tr.CapacityKnown && atCap,
		"running below its cap":      tr.CapacityKnown && !atCap,
		"running below the most":     !tr.CapacityKnown && tr.Capacity > 0 && !atCap,
		"batch cap unknown":          tr.Capacity == 0,
		"many waiting":               tr.Queued >= c.MinQueued && tr.Queued >= c.QueuedToRunning*tr.Running,
		"few waiting":                !(tr.Queued >= c.MinQueued && tr.Queued >= c.QueuedToRunning*tr.Running),
		"KV pool full":               tr.KVUsageOK && tr.KVUsage >= c.KVFullUsage,
		"KV room left":               tr.KVUsageOK && tr.KVUsage < c.KVFullUsage,
	} {
		if strings.Contains(label, fact) && !holds {
			t.Errorf("label says %q but the numbers do not: %s", fact, tr)
		}
	}
	for _, vague := range []string{"running low", "running high", "waiting low", "waiting high"} {
		if strings.Contains(label, vague) {
			t.Errorf("label says %q without saying against what: %s", vague, tr)
		}
	}
	switch tr.Verdict {
	case detect.TriageSaturated, detect.TriageFullBatch:
		if !atCap {
			t.Errorf("%s below the batch's cap: %s", tr.Verdict, tr)
		}
	case detect.TriageAdmission:
		if tr.RunningHigh || !tr.Waiting() {
			t.Errorf("admission bottleneck needs requests waiting below the cap: %s", tr)
		}
	}
}

// The numbers of the pages the issue quotes: each label now reads what its
// numbers say, and the step follows the label.
func TestTriageLabelFitsItsNumbers(t *testing.T) {
	slowTTFT := hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incident, 0.3, 2.8))
	queueWait := hist(series.QueueTimeSeconds, queueBounds, constant(10), stepAt(incident, 0.05, 2.3))
	slowITL := hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(incident, 0.028, 0.08))
	kv := func(v float64) []metric {
		return []metric{gauge(series.TokenUsage, stepAt(incident, 0.5, v)), gauge(series.FullTokenUsage, stepAt(incident, 0.5, v))}
	}
	tests := []struct {
		name     string
		scenario *scenario
		verdict  detect.TriageVerdict
		layer    detect.Layer
		label    []string
		notStep  []string
	}{
		// "admission bottleneck (running low, waiting high): 128 running
		// (capacity 128), 29 queued": the batch at the most it ran, a queue
		// short against it, the first-token time spent waiting.
		{"at the most it ran, queue wait dominating", fullEngine().with(
			gauge(series.NumRunningReqs, constant(128)), gauge(series.NumQueueReqs, stepAt(incident, 2, 29)), slowTTFT, queueWait),
			detect.TriageSaturated, detect.LayerQueue, []string{"running at the most it ran", "requests wait"}, []string{"--max-running-requests"}},
		// "running low… 82 running": at its most, few waiting, slow.
		{"at the most it ran, few waiting, slow", fullEngine().with(gauge(series.NumRunningReqs, constant(82)), slowITL),
			detect.TriageExecution, "", []string{"running near the most it ran", "few waiting", "latency high"}, nil},
		// The queue-wait branch at 96% KV: memory, not the cap or the policy.
		{"queue wait at a full pool", fullEngine().with(append(kv(0.96),
			gauge(series.NumRunningReqs, stepAt(incident, 40, 20)), slowTTFT, queueWait)...),
			detect.TriageAdmission, detect.LayerMemory, []string{"KV pool full", "requests wait"}, []string{"--max-running-requests", "--schedule-policy"}},
		// Requests wait below the configured cap with room in the pool: the
		// cap is not what holds them, so it is not the step.
		{"below the configured cap with room", fullEngine().with(gauge("sglang:max_running_requests", constant(256)),
			gauge(series.NumRunningReqs, stepAt(incident, 40, 20)), gauge(series.NumQueueReqs, stepAt(incident, 2, 47))),
			detect.TriageAdmission, detect.LayerQueue, []string{"running below its cap", "many waiting", "KV room left"}, []string{"raise --max-running-requests"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := triageOf(t, tt.scenario)
			labelAgrees(t, tr)
			wantVerdict(t, tr, tt.verdict, tt.layer)
			contains(t, "label", tr.Label(), tt.label...)
			for _, s := range tt.notStep {
				if strings.Contains(tr.NextStep, s) {
					t.Errorf("next step names %s: %s", s, tr)
				}
			}
		})
	}
}

// The queue-wait numbers are means over the triage range. A page gives TTFT
// percentiles over another span beside them, so the line says which they are.
func TestTriageQueueWaitSaysMeansAndSpan(t *testing.T) {
	tr := triageOf(t, fullEngine().with(
		gauge(series.NumRunningReqs, constant(128)), gauge(series.NumQueueReqs, stepAt(incident, 2, 29)),
		hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incident, 0.3, 2.8)),
		hist(series.QueueTimeSeconds, queueBounds, constant(10), stepAt(incident, 0.05, 2.3))))
	contains(t, "triage line", tr.String(), "mean queue wait 2.3 s of mean TTFT 2.8 s over the last 1m")
}

// Slower decode steps hold each slot longer, so arriving requests wait:
// their queue wait is the decode's backlog. The triage does not call that
// an admission bottleneck and send on-call to the scheduler's settings
// (the demo's decode-slowdown page did, beside a diagnosis that said "the
// GPU side, not the load"). The same queue wait at an unchanged decode
// speed is still one.
func TestTriageQueueWaitBehindSlowerDecodeIsNotAdmission(t *testing.T) {
	engine := func(itl float64) *scenario {
		return fullEngine().with(
			gauge(series.NumRunningReqs, stepAt(incident, 40, 20)),
			hist(series.TTFTSeconds, ttftBounds, constant(10), stepAt(incident, 0.3, 2.8)),
			hist(series.QueueTimeSeconds, queueBounds, constant(10), stepAt(incident, 0.05, 2.3)),
			hist(series.InterTokenLatency, itlBounds, constant(300), stepAt(incident, 0.028, itl)))
	}
	slower := triageOf(t, engine(0.08))
	labelAgrees(t, slower)
	wantVerdict(t, slower, detect.TriageExecution, "")
	contains(t, "triage line", slower.String(), "mean queue wait 2.3 s of mean TTFT 2.8 s over the last 1m, the backlog of slower decode steps")
	if strings.Contains(slower.NextStep, "scheduling side") || strings.Contains(slower.NextStep, "--max-prefill-tokens") {
		t.Errorf("a slower decode's backlog sends on-call to the scheduler: %s", slower)
	}
	steady := triageOf(t, engine(0.028))
	wantVerdict(t, steady, detect.TriageAdmission, detect.LayerQueue)
	contains(t, "triage line", steady.Label(), "requests wait")
	// The decode detector established the slowdown; the triage's own
	// comparison may not show it (its baseline hour holds an earlier slow
	// spell, as the demo's did), and it takes the detector's word.
	spell := engine(0.028).with(hist(series.InterTokenLatency, itlBounds, constant(300), constant(0.08)))
	store, now := spell.run(t, detect.DefaultConfig())
	var told detect.TriageResult
	store.View(spell.target, func(w detect.Window) { told = detect.DefaultConfig().Triage.Classify(w, now, detect.DecodeSlower) })
	wantVerdict(t, told, detect.TriageExecution, "")
	contains(t, "triage line", told.String(), "over the last 1m, the backlog of slower decode steps.")
	// Where both show it, the detector's numbers are the page's: the
	// triage gives no inter-token figures against a baseline of its own.
	both := engine(0.08)
	store, now = both.run(t, detect.DefaultConfig())
	store.View(both.target, func(w detect.Window) { told = detect.DefaultConfig().Triage.Classify(w, now, detect.DecodeSlower) })
	contains(t, "triage line", told.String(), "over the last 1m, the backlog of slower decode steps.")
	// A full KV pool holds admission whatever the decode speed (a
	// preemption storm slows the decode too): still memory.
	full := triageOf(t, engine(0.08).with(
		gauge(series.TokenUsage, stepAt(incident, 0.5, 0.96)), gauge(series.FullTokenUsage, stepAt(incident, 0.5, 0.96))))
	wantVerdict(t, full, detect.TriageAdmission, detect.LayerMemory)
	if strings.Contains(full.String(), "backlog") {
		t.Errorf("a full pool's wait is called a decode backlog: %s", full)
	}
}

// A replica too young for the most it ran to stand for its cap: the label
// says the cap is unknown and the step says where to read it.
func TestTriageCapUnknownSaysSo(t *testing.T) {
	s := fullEngine().with(gauge(series.NumRunningReqs, constant(8)), gauge(series.NumQueueReqs, constant(47)))
	s.length = 3 * time.Minute
	store, now := s.run(t, detect.DefaultConfig())
	var tr detect.TriageResult
	store.View(s.target, func(w detect.Window) { tr = detect.DefaultConfig().Triage.Classify(w, now, detect.LatencyToJudge) })
	labelAgrees(t, tr)
	contains(t, "triage", tr.String(), "batch cap unknown", "(the cap is not exposed)", "read --max-running-requests from /server_info (/get_server_info on older releases)")
	if tr.Capacity != 0 {
		t.Errorf("capacity %v guessed from 3 minutes", tr.Capacity)
	}
}
