package promsource

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// A dcgm-exporter scraped by Prometheus through a ServiceMonitor
// (honor_labels false): Prometheus' own namespace/pod/container are the
// exporter's, dcgm-exporter's pod labels came back as exported_*; GPU 1 is
// held by no pod (its empty labels were dropped, so nothing clashed).
const gpuRangeBody = `{"status":"success","data":{"resultType":"matrix","result":[
{"metric":{"__name__":"DCGM_FI_DEV_XID_ERRORS","gpu":"0","UUID":"GPU-a","Hostname":"gpu-node-a","modelName":"NVIDIA H100 80GB HBM3","device":"nvidia0","pci_bus_id":"00000000:18:00.0","err_code":"79","err_msg":"GPU has fallen off the bus","exported_namespace":"llm","exported_pod":"llama-0","exported_container":"sglang","namespace":"gpu-operator","pod":"nvidia-dcgm-exporter-x7k2p","container":"nvidia-dcgm-exporter","instance":"10.0.3.7:9400","job":"nvidia-dcgm-exporter"},"values":[[1000,"79"]]},
{"metric":{"__name__":"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS","gpu":"1","UUID":"GPU-b","Hostname":"gpu-node-a","namespace":"gpu-operator","pod":"nvidia-dcgm-exporter-x7k2p","container":"nvidia-dcgm-exporter","instance":"10.0.3.7:9400","job":"nvidia-dcgm-exporter"},"values":[[1000,"64"]]},
{"metric":{"__name__":"up","instance":"10.0.3.7:9400","job":"nvidia-dcgm-exporter"},"values":[[1000,"1"]]}
]}}`

func TestDCGMSeriesFromPrometheusAreGPUReplicas(t *testing.T) {
	api := &fakeAPI{rng: gpuRangeBody}
	srv := httptest.NewServer(api)
	defer srv.Close()
	r, _ := newReader(t, srv.URL, func(c *Config) { c.ReplicasPerQuery = 0 })
	got, err := r.Range(context.Background(), time.Unix(1000, 0), time.Unix(1000, 0), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Kind != "gpu" || got[0].Target != "10.0.3.7:9400" || len(got[0].Groups) != 2 {
		t.Fatalf("scrapes %+v", got)
	}
	g0, g1 := got[0].Groups[0], got[0].Groups[1]
	if g0.Worker != "gpu0" || g0.Labels[series.GPUPod] != "llama-0" || g0.Labels[series.GPUNamespace] != "llm" || g0.Labels[series.GPUUUID] != "GPU-a" {
		t.Errorf("gpu0 %s %v", g0.Worker, g0.Labels)
	}
	if g1.Worker != "gpu1" || g1.Labels[series.GPUPod] != "" {
		t.Errorf("gpu1, held by no pod, is %s %v", g1.Worker, g1.Labels)
	}
	if len(g0.Samples) != 1 || g0.Samples[0].Name != series.DCGMXIDErrors || g0.Samples[0].Value != 79 || len(g0.Samples[0].Labels) != 0 {
		t.Errorf("gpu0 samples %+v", g0.Samples)
	}
	if len(g1.Samples) != 1 || g1.Samples[0].Name != series.DCGMClockEventReasons {
		t.Errorf("gpu1 samples %+v", g1.Samples)
	}
	for _, name := range []string{series.DCGMXIDErrors, series.DCGMClockThrottleReasons, series.DCGMClockEventReasons} {
		if !strings.Contains(api.queries[0], name) {
			t.Errorf("the query does not ask for %s: %s", name, api.queries[0])
		}
	}
}
