package notify_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

func TestFormatValueOneStylePerUnit(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{0.545, "ratio", "54.5%"},
		{1, "ratio", "100%"},
		{0.04, "ratio", "4%"},
		{97, "%", "97%"},
		{8.1, "s", "8.1 s"},
		{0.41234, "s", "0.412 s"},
		{0.625, "/s", "0.625/s"},
		{1830, "tokens/s", "1830 tokens/s"},
		{294, "", "294"},
		{3900.4, "tokens", "3900 tokens"},
	} {
		if got := notify.FormatValue(c.v, c.unit); got != c.want {
			t.Errorf("FormatValue(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}

func TestFieldWithoutBaselineDropsRelativeRule(t *testing.T) {
	rel := notify.Field{Name: "retracted requests/s", Value: 0.625, Unit: "/s", Threshold: ">= 5x baseline"}
	if got := notify.FormatField(rel); got != "retracted requests/s: 0.625/s" {
		t.Errorf("no baseline: %q", got)
	}
	rel.Baseline, rel.HasBase = math.NaN(), true
	if got := notify.FormatField(rel); got != "retracted requests/s: 0.625/s" {
		t.Errorf("NaN baseline: %q", got)
	}
	rel.Baseline = 0.1
	if got := notify.FormatField(rel); got != "retracted requests/s: 0.625/s (baseline 0.1/s; rule >= 5x baseline)" {
		t.Errorf("with baseline: %q", got)
	}
	abs := notify.Field{Name: "KV cache usage", Value: 1, Unit: "ratio", Threshold: ">= 99%"}
	if got := notify.FormatField(abs); got != "KV cache usage: 100% (rule >= 99%)" {
		t.Errorf("absolute rule: %q", got)
	}
	shown := notify.Shown([]notify.Field{{Name: "a", Value: math.NaN()}, {Name: "b", Value: 1}, {Name: "c", Value: math.Inf(1)}})
	if len(shown) != 1 || shown[0].Name != "b" {
		t.Errorf("Shown = %+v, want only the finite field", shown)
	}
}

func TestTitle(t *testing.T) {
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	ev := notify.Event{Class: "preempt_storm", Severity: detect.Critical, Replica: "sgl-b", Kind: notify.KindTrigger, Status: notify.StatusFiring,
		Summary: "Preemption storm: 0.625 retracted requests/s", StartsAt: at, At: at}
	if got := notify.Title(ev); got != "[CRITICAL] sgl-b: Preemption storm: 0.625 retracted requests/s" {
		t.Errorf("fallback title %q", got)
	}
	ev.Headline = "sgl-b: requests preempted 0.6/s, KV cache full; queue 294, p99 TTFT 8.1 s"
	if got := notify.Title(ev); got != "[CRITICAL] "+ev.Headline {
		t.Errorf("title %q", got)
	}
	res := ev
	res.Kind, res.Status, res.EndsAt, res.At = notify.KindResolve, notify.StatusResolved, at.Add(12*time.Minute), at.Add(12*time.Minute)
	res.Evidence = []notify.Field{
		{Name: "retracted requests/s", Value: 0.625, Unit: "/s"},
		{Name: "queued requests", Value: 294},
		{Name: "TTFT p99", Value: 8.1, Unit: "s"},
		{Name: "KV cache usage (max in range)", Value: 1, Unit: "ratio"},
		{Name: "prefix cache hit rate", Value: 0.29, Unit: "ratio", LowerIsWorse: true},
		{Name: "triage: running requests (avg)", Value: 12},
	}
	res.Recovered = []notify.Field{
		{Name: "queued requests", Value: 3},
		{Name: "running requests", Value: 40},
		{Name: "KV cache usage", Value: 0.55, Unit: "ratio"},
		{Name: "prefix hit rate", Value: 0.82, Unit: "ratio"},
		{Name: "retracted requests", Value: 0, Unit: "/s"},
		{Name: "time to first token p99", Value: 0.4, Unit: "s"},
		{Name: "inter-token latency p99", Value: math.NaN(), Unit: "s"},
	}
	res.Headline = "sgl-b: preempt storm over after 12 min; now queue 3, p99 TTFT 0.4 s"
	want := "[RESOLVED] sgl-b: preempt storm over after 12 min; now queue 3, p99 TTFT 0.4 s (peak queue 294, p99 TTFT 8.1 s)"
	if got := notify.Title(res); got != want {
		t.Errorf("resolve title\n got %q\nwant %q", got, want)
	}
	res.Headline = ""
	want = "[RESOLVED] sgl-b: Preemption storm: 0.625 retracted requests/s — recovered after 12 min; queue 3 (peak 294), p99 TTFT 0.4 s (peak 8.1 s)"
	if got := notify.Title(res); got != want {
		t.Errorf("resolve title without a headline\n got %q\nwant %q", got, want)
	}
	var texts []string
	for _, r := range notify.Recoveries(res) {
		texts = append(texts, r.Text())
	}
	wantTexts := []string{
		"queued requests: 3 (peak 294)",
		"running requests: 40",
		"KV cache usage: 55% (peak 100%)",
		"prefix hit rate: 82% (lowest 29%)",
		"retracted requests: 0/s (peak 0.625/s)",
		"time to first token p99: 0.4 s (peak 8.1 s)",
		"triage: running requests (avg): peak 12",
	}
	if strings.Join(texts, "\n") != strings.Join(wantTexts, "\n") {
		t.Errorf("recoveries\n got %q\nwant %q", texts, wantTexts)
	}
}

// A resolve gives each signal once, at the worst any evidence of it or
// what users felt reached: the demo's storm resolve read "KV cache usage:
// 13.4% (peak 91.2%)" under a headline of a pool 100% full, because the
// average's evidence came before the maximum's.
func TestRecoveryPeakIsTheWorstOfEveryMeasure(t *testing.T) {
	aborts, queue := 8.26, 40.0
	ev := notify.Event{Kind: notify.KindResolve, Status: notify.StatusResolved,
		Evidence: []notify.Field{
			{Name: "KV cache usage (avg)", Value: 0.912, Baseline: 0.11, HasBase: true, Unit: "ratio"},
			{Name: "aborted requests/s", Value: 2.26, Baseline: 0, HasBase: true, Unit: "/s"},
			{Name: "KV cache usage (max in range)", Value: 0.999, Threshold: ">= 90%", Unit: "ratio"},
			{Name: "aborted requests/s (clients gave up)", Value: 5.37, Threshold: ">= 1/s", Unit: "/s"},
			{Name: "queued requests (avg over 20s)", Value: 229, Baseline: 6, HasBase: true},
			{Name: "ttft p99 (worst replica)", Value: 12, Threshold: ">= 1 s", Unit: "s"},
			{Name: "TTFT p99", Value: 19.8, Baseline: 0.1, HasBase: true, Unit: "s"},
			{Name: "evicted tokens/s (last range)", Value: 900, Baseline: 100, HasBase: true, Unit: "/s"},
			{Name: "evicted tokens/s", Value: 1200, Baseline: 100, HasBase: true, Unit: "/s"},
		},
		Recovered: []notify.Field{
			{Name: "queued requests", Value: 0},
			{Name: "KV cache usage", Value: 0.134, Unit: "ratio"},
			{Name: "aborted requests", Value: 0, Unit: "/s"},
		},
		Felt: &notify.Impact{AbortsPerSecond: &aborts, Queued: &queue},
	}
	var got []string
	for _, r := range notify.Recoveries(ev) {
		got = append(got, r.Text())
	}
	want := []string{
		"queued requests: 0 (peak 229)",
		"KV cache usage: 13.4% (peak 99.9%)",
		"aborted requests: 0/s (peak 8.26/s)",
		"TTFT p99: peak 19.8 s",
		"evicted tokens/s: peak 1200/s",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("recoveries\n got %q\nwant %q", got, want)
	}
}

func TestTriageShownOnce(t *testing.T) {
	ev := notify.Event{Diagnosis: "KV pool full.", Triage: "admission bottleneck: 3 running, 200 queued"}
	if notify.Triage(ev) != ev.Triage {
		t.Errorf("triage dropped")
	}
	res := ev
	res.Kind, res.Status = notify.KindResolve, notify.StatusResolved
	if notify.Triage(res) != "" {
		t.Errorf("a resolve shows the firing triage's next step")
	}
	ev.Diagnosis += " Layer triage: " + ev.Triage
	if notify.Triage(ev) != "" {
		t.Errorf("triage shown although the diagnosis states it")
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		45 * time.Second:                                      "45 s",
		59*time.Second + 600*time.Millisecond:                 "1 min",
		12*time.Minute + 29*time.Second:                       "12 min",
		time.Minute + 53*time.Second:                          "1 min 53 s",
		2 * time.Minute:                                       "2 min",
		9*time.Minute + 59*time.Second + 700*time.Millisecond: "10 min",
		59*time.Minute + 40*time.Second:                       "1 h",
		time.Hour:                                             "1 h",
		65 * time.Minute:                                      "1 h 5 min",
		51 * time.Hour:                                        "2 d 3 h",
		51*time.Hour + 40*time.Minute:                         "2 d 4 h",
	} {
		if got := notify.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
