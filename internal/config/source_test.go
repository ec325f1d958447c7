package config

import (
	"strings"
	"testing"
	"time"
)

// TestHistoryYAML: the history block takes Prometheus' own HTTP client
// settings inline, and source: prometheus needs no targets.
func TestHistoryYAML(t *testing.T) {
	cfg, err := Parse(Default(), []byte(`
source: prometheus
history:
  url: https://thanos.example:10902
  replica_label: pod
  selector: job="sglang"
  startup_budget: 10s
  bearer_token_file: /var/run/secrets/token
  tls_config: {ca_file: /etc/ca.pem}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid configuration rejected: %v", err)
	}
	h := cfg.History
	if !cfg.FromPrometheus() || h.ReplicaLabel != "pod" || h.StartupBudget != 10*time.Second || h.HTTPClient.BearerTokenFile != "/var/run/secrets/token" || h.HTTPClient.TLSConfig.CAFile != "/etc/ca.pem" {
		t.Errorf("decoded %+v", h)
	}
	if h.Chunk != 10*time.Minute || !h.HTTPClient.FollowRedirects {
		t.Errorf("defaults lost under the block: chunk %s, follow_redirects %v", h.Chunk, h.HTTPClient.FollowRedirects)
	}
}

// TestHistoryErrorsNameTheirPath: every mistake is reported with its key.
func TestHistoryErrorsNameTheirPath(t *testing.T) {
	cfg, err := Parse(Default(), []byte(`
source: prometheus
history:
  url: ftp://x
  replica_label: ""
  selector: '{job="x"}'
  chunk: 0s
  bearer_token: abc
  bearer_token_file: /t
`))
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"history.url", "history.replica_label", "history.selector", "history.chunk", "bearer_token"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %s:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "abc") {
		t.Errorf("the error shows the bearer token: %v", err)
	}

	cfg, _ = Parse(Default(), []byte("source: prometheus\n"))
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "history.url") {
		t.Errorf("source: prometheus without history.url: %v", err)
	}
	cfg, _ = Parse(Default(), []byte("source: prom\ntargets: [{name: a, url: 'http://a:1'}]\n"))
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), `source: "prom"`) {
		t.Errorf("unknown source: %v", err)
	}
}
