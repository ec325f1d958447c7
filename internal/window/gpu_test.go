package window_test

import (
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// A dcgm-exporter's groups are GPUs: each is a replica of kind gpu named
// target/worker whose labels are the GPU's own, not the exporter's; a
// gateway's worker is still an engine.
func TestGPUGroupsAreGPUReplicasWithTheirOwnLabels(t *testing.T) {
	store, err := window.New(window.Options{Retention: time.Hour, ScrapeInterval: 5 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 0)
	gpu := map[string]string{series.GPUNode: "n1", series.GPUIndex: "0", series.GPUUUID: "GPU-a", series.GPUPod: "p"}
	for i := range 2 {
		if err := store.Append(series.Scrape{Target: "dcgm", Kind: detect.KindGPU, At: at.Add(time.Duration(i) * 5 * time.Second),
			Labels: map[string]string{"app": "nvidia-dcgm-exporter"},
			Groups: []series.Group{{Worker: "gpu0", Labels: gpu, Samples: []series.Sample{{Name: series.DCGMGPUUtil, Value: 90}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Append(series.Scrape{Target: "gw", Kind: "gateway", At: at,
		Groups: []series.Group{{Worker: "10.0.0.1:30000", Samples: []series.Sample{{Name: series.NumRunningReqs, Value: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	got := map[string]detect.Replica{}
	for _, r := range store.Replicas() {
		got[r.Name] = r
	}
	r, ok := got["dcgm/gpu0"]
	if !ok || r.Kind != detect.KindGPU || r.Labels[series.GPUUUID] != "GPU-a" || r.Labels["app"] != "" {
		t.Errorf("gpu replica %+v", r)
	}
	gpu[series.GPUPod] = "changed" // the scraper's buffer, reused
	if store.Replicas(); r.Labels[series.GPUPod] != "p" {
		t.Error("the replica shares the scrape's labels")
	}
	if w := got["gw/10.0.0.1:30000"]; w.Kind != "engine" {
		t.Errorf("gateway worker kind %q", w.Kind)
	}
}
