package deploy

import (
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The chart's dashboard ConfigMap (grafanaDashboard.enabled; CI renders it
// as extra-single-dashboard) carries the sidecar's label and exactly the
// dashboard of deploy/grafana.
func TestHelmDashboardConfigMap(t *testing.T) {
	want, err := os.ReadFile("grafana/sglang-watchdog.json")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for name, f := range helmRenders(t) {
		for _, o := range decodeFile(t, f) {
			cm, ok := o.obj.(*corev1.ConfigMap)
			if !ok || cm.Labels["grafana_dashboard"] == "" {
				continue
			}
			found++
			if cm.Labels["grafana_dashboard"] != "1" {
				t.Errorf("%s: ConfigMap %s: label grafana_dashboard=%q, want \"1\"", name, cm.Name, cm.Labels["grafana_dashboard"])
			}
			if got := cm.Data["sglang-watchdog.json"]; got != string(want) {
				t.Errorf("%s: ConfigMap %s: sglang-watchdog.json is not deploy/grafana/sglang-watchdog.json (%d bytes, want %d)", name, cm.Name, len(got), len(want))
			}
		}
	}
	if found == 0 {
		t.Error("no render has the dashboard ConfigMap: .ci/run renders one with grafanaDashboard.enabled=true")
	}
}
