package diagnose

import (
	"strings"
	"testing"
	"time"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct{ in, name, url string }{
		{"http://10.0.0.5:30000", "10.0.0.5:30000", "http://10.0.0.5:30000/metrics"},
		{"http://10.0.0.5:30000/", "10.0.0.5:30000", "http://10.0.0.5:30000/metrics"},
		{"http://10.0.0.5:30000/metrics", "10.0.0.5:30000", "http://10.0.0.5:30000/metrics"},
		{"https://gw.example/replica-3/metrics", "gw.example", "https://gw.example/replica-3/metrics"},
		{"localhost:30000", "localhost:30000", "http://localhost:30000/metrics"},
		{"sim-0=http://127.0.0.1:4000", "sim-0", "http://127.0.0.1:4000/metrics"},
		{"http://h:1/metrics?token=a=b", "h:1", "http://h:1/metrics?token=a=b"},
	} {
		got, err := ParseTarget(tc.in)
		if err != nil || got.Name != tc.name || got.URL != tc.url || got.Kind != "engine" {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %s %s", tc.in, got, err, tc.name, tc.url)
		}
	}
	for _, bad := range []string{"", "name=", "ftp://h:1/metrics", "http://"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q) accepted", bad)
		}
	}
}

func TestParseTargets(t *testing.T) {
	if _, err := ParseTargets(nil); err == nil {
		t.Error("no targets accepted")
	}
	_, err := ParseTargets([]string{"http://h:1", "http://h:1/other/metrics"})
	if err == nil || !strings.Contains(err.Error(), "name=URL") {
		t.Errorf("duplicate host:port: %v, want a hint to name them", err)
	}
	ts, err := ParseTargets([]string{"a=http://h:1", "b=http://h:1/other/metrics"})
	if err != nil || len(ts) != 2 {
		t.Errorf("named duplicates: %v, %v", ts, err)
	}
}

// The report, printed to terminals and CI logs, names a target by its
// URL without the credentials it carries.
func TestReportURLHidesCredentials(t *testing.T) {
	a, b := healthyPair()
	to := observe(t, "e", 10*time.Second, expo(a), expo(b))
	to.Target.URL = strings.Replace(to.Target.URL, "http://", "http://user:pw-77@", 1) + "?token=tok-88"
	tr := diagnoseOne(t, 10*time.Second, to).Targets[0]
	if strings.Contains(tr.URL, "pw-77") || strings.Contains(tr.URL, "tok-88") || strings.Contains(tr.URL, "user") ||
		!strings.HasSuffix(tr.URL, "/metrics") {
		t.Errorf("report URL %q, want the target's scheme, host and path only", tr.URL)
	}
}
