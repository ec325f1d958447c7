package scrape

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// gpuReads are DCGM families a reader of GPUs keeps, the throttle bitmask
// by its current name only.
var gpuReads = []string{series.DCGMXIDErrors, series.DCGMClockEventReasons, series.DCGMSMClock,
	series.DCGMGPUTemp, series.DCGMGPUUtil, series.DCGMECCDBEVolatile, series.DCGMRowRemapFailure}

func scrapeGPU(t *testing.T, body []byte) series.Scrape {
	t.Helper()
	srv := serve(t, body)
	sc := ScrapeOnce(context.Background(), client(t), Target{Name: "dcgm-a", URL: srv.URL + "/metrics", Kind: KindGPU},
		Options{KeepFamilies: gpuReads})
	if sc.Reason != "" {
		t.Fatalf("scrape failed: %s %s", sc.Reason, sc.Error)
	}
	return sc
}

func workers(gs []series.Group) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Worker)
	}
	return out
}

// A current release in Kubernetes mode: one group per GPU named gpu<index>,
// the GPU's identity and pod in the group's labels, not on its samples;
// err_code/err_msg gone from the Xid; a GPU no pod holds (empty pod
// labels) has no pod.
func TestGPUExporterWithPodsIsOneGroupPerGPU(t *testing.T) {
	body, err := fixture.DCGM(fixture.DCGMPods)
	if err != nil {
		t.Fatal(err)
	}
	sc := scrapeGPU(t, body)
	if got := workers(sc.Groups); !slices.Equal(got, []string{"gpu0", "gpu1", "gpu2"}) {
		t.Fatalf("groups %v", got)
	}
	want := map[string]string{series.GPUNode: "gpu-node-a", series.GPUIndex: "1", series.GPUUUID: "GPU-9c3e2d14-77a0-41f9-b2c8-0e5d6a8f3b12",
		series.GPUModel: "NVIDIA H100 80GB HBM3", series.GPUPCIBusID: "00000000:2A:00.0",
		series.GPUNamespace: "llm", series.GPUPod: "llama-70b-0", series.GPUContainer: "sglang"}
	if !maps.Equal(sc.Groups[1].Labels, want) {
		t.Errorf("gpu1 labels %v, want %v", sc.Groups[1].Labels, want)
	}
	if l := sc.Groups[2].Labels; l[series.GPUPod] != "" || l[series.GPUNamespace] != "" || l[series.GPUIndex] != "2" {
		t.Errorf("an unallocated GPU has labels %v", l)
	}
	g := sc.Groups[0]
	names := map[string]bool{}
	for _, s := range g.Samples {
		names[s.Name] = true
		if len(s.Labels) != 0 {
			t.Errorf("%s kept labels %v", s.Name, s.Labels)
		}
	}
	for _, want := range gpuReads {
		if !names[want] {
			t.Errorf("gpu0 lacks %s", want)
		}
	}
	if names["DCGM_FI_DEV_MEM_COPY_UTIL"] {
		t.Error("a family nobody reads was kept")
	}
	if v, ok := find(g, series.DCGMClockEventReasons, ""); !ok || v != 4 {
		t.Errorf("clock event reasons = %v, %v", v, ok)
	}
}

// An older release: no pod labels at all, the Xid without err labels and
// the bitmask under DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, read as the
// current name (and kept by a keep list that names only the current one).
func TestGPUExporterWithoutPodsReadsTheOlderThrottleName(t *testing.T) {
	body, err := fixture.DCGMWith(fixture.DCGMNoPods, fixture.DCGMEdit{Family: "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", GPU: "1", Value: "64"})
	if err != nil {
		t.Fatal(err)
	}
	sc := scrapeGPU(t, body)
	if got := workers(sc.Groups); !slices.Equal(got, []string{"gpu0", "gpu1"}) {
		t.Fatalf("groups %v", got)
	}
	for _, g := range sc.Groups {
		if _, has := g.Labels[series.GPUPod]; has {
			t.Errorf("%s has a pod: %v", g.Worker, g.Labels)
		}
		if g.Labels[series.GPUNode] != "gpu-node-b" || g.Labels[series.GPUUUID] == "" {
			t.Errorf("%s identity %v", g.Worker, g.Labels)
		}
	}
	if v, ok := find(sc.Groups[1], series.DCGMClockEventReasons, ""); !ok || v != 64 {
		t.Errorf("throttle reasons under the current name = %v, %v", v, ok)
	}
	if v, ok := find(sc.Groups[1], series.DCGMXIDErrors, ""); !ok || v != 0 {
		t.Errorf("xid = %v, %v", v, ok)
	}
}

// A release in transition exposing both throttle names keeps one series;
// a GPU without UUID is keyed by node and index; two GPUs of one target
// with the same index (two nodes behind one name) stay two replicas.
func TestGPUNormalizationEdges(t *testing.T) {
	raw := []RawSample{
		{Name: "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", Labels: parseLabels(`gpu="0",UUID="GPU-a",Hostname="n1"`), Value: 8},
		{Name: series.DCGMClockEventReasons, Labels: parseLabels(`gpu="0",UUID="GPU-a",Hostname="n1"`), Value: 8},
		{Name: series.DCGMGPUUtil, Labels: parseLabels(`gpu="0",Hostname="n2"`), Value: 99},
		{Name: series.DCGMGPUUtil, Labels: parseLabels(`gpu="0",Hostname="n2",pod="",namespace=""`), Value: 97},
	}
	groups, err := normalizeGPU(raw, 0, legacyAliases())
	if err != nil {
		t.Fatal(err)
	}
	if got := workers(groups); !slices.Equal(got, []string{"gpu0-GPU-a", "n2-gpu0"}) {
		t.Fatalf("groups %v", got)
	}
	if n := len(groups[0].Samples); n != 1 || groups[0].Samples[0].Name != series.DCGMClockEventReasons {
		t.Errorf("both throttle names kept: %v", groups[0].Samples)
	}
	if v, _ := find(groups[1], series.DCGMGPUUtil, ""); v != 99 {
		t.Errorf("copies of one series combine to %v, want the largest", v)
	}
	if _, err := normalizeGPU(raw, 1, legacyAliases()); err == nil {
		t.Error("the series limit was not applied")
	}
}

// Samples read from Prometheus normalize as a scrape does.
func TestGPUNormalizerMatchesTheScraper(t *testing.T) {
	body, err := fixture.DCGM(fixture.DCGMPods)
	if err != nil {
		t.Fatal(err)
	}
	scraped := scrapeGPU(t, body)
	var raw []RawSample
	p := newTextParser(newKeepSet(gpuReads).filter())
	raw, err = p.Parse(raw, body)
	if err != nil {
		t.Fatal(err)
	}
	sc := NewNormalizer(0).Scrape(Target{Name: "dcgm-a", Kind: KindGPU}, time.Unix(0, 0), raw)
	if len(sc.Groups) != len(scraped.Groups) {
		t.Fatalf("%d groups, the scraper made %d", len(sc.Groups), len(scraped.Groups))
	}
	for i := range sc.Groups {
		a, b := sc.Groups[i], scraped.Groups[i]
		if a.Worker != b.Worker || !maps.Equal(a.Labels, b.Labels) || len(a.Samples) != len(b.Samples) {
			t.Errorf("group %d: %s %v %d samples, scraper %s %v %d", i, a.Worker, a.Labels, len(a.Samples), b.Worker, b.Labels, len(b.Samples))
		}
	}
}

func TestGPUTargetKindIsValid(t *testing.T) {
	if err := validateTargets([]Target{{Name: "dcgm", URL: "http://10.0.0.9:9400/metrics", Kind: KindGPU}}); err != nil {
		t.Error(err)
	}
	if err := validateTargets([]Target{{Name: "dcgm", URL: "http://10.0.0.9:9400/metrics", Kind: "nvidia"}}); err == nil {
		t.Error("an unknown kind was accepted")
	}
}
