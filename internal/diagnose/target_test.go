package diagnose

import (
	"strings"
	"testing"
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

func TestDisplayURLHidesCredentials(t *testing.T) {
	if got := displayURL("http://user:pw@h:1/metrics?token=x"); got != "http://h:1/metrics" {
		t.Errorf("displayURL = %q", got)
	}
}
