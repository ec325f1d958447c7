package discovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

const prefillDecode = `[
  {"targets": ["10.0.0.1:30000", "10.0.0.2:30000"], "labels": {"model": "llama-3-70b", "role": "decode"}},
  {"targets": ["router.llm.svc:29000"], "labels": {"kind": "gateway", "__metrics_path__": "/engine_metrics", "__scheme__": "https", "__meta_x": "dropped"}}
]`

// The first read publishes at once: names are host:port, labels reach the
// targets, kind and the endpoint labels set the group's endpoint, and the
// entry's client settings go with every target.
func TestFileSDInitialRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "fleet.json"), prefillDecode)
		writeFile(t, filepath.Join(dir, "canary.yaml"), "- targets: ['10.0.1.1:30000']\n  labels: {model: llama-3-8b}\n")
		writeFile(t, filepath.Join(dir, "notes.txt"), "not a target file")
		client := &scrape.HTTPClientConfig{}
		cfg := Config{FileSD: []FileSDConfig{{Files: []string{filepath.Join(dir, "*.json"), filepath.Join(dir, "*.yaml")}, HTTPClient: client}}}
		h := newHarness(t, cfg, nil, nil, nil)
		start := time.Now()
		h.start(t)

		u := h.next(t)
		if u.at != start {
			t.Errorf("first update after %v, want at once", u.at.Sub(start))
		}
		wantNames(t, u.targets, "10.0.0.1:30000", "10.0.0.2:30000", "10.0.1.1:30000", "router.llm.svc:29000")
		e := find(t, u.targets, "10.0.0.2:30000")
		if e.URL != "http://10.0.0.2:30000/metrics" || e.Kind != scrape.KindEngine || e.Labels["model"] != "llama-3-70b" ||
			e.Labels["role"] != "decode" || e.HTTPClient != client {
			t.Errorf("engine target %+v", e)
		}
		gw := find(t, u.targets, "router.llm.svc:29000")
		if gw.URL != "https://router.llm.svc:29000/engine_metrics" || gw.Kind != scrape.KindGateway || len(gw.Labels) != 0 {
			t.Errorf("gateway target %+v: want kind, scheme and path from the labels, no label copied", gw)
		}
		if got := testutil.ToFloat64(h.d.metrics.targets.WithLabelValues(SourceFileSD)); got != 4 {
			t.Errorf("watchdog_discovery_targets{source=file_sd} = %v", got)
		}
	})
}

// A changed file is published within a refresh interval; an unchanged one
// publishes nothing; a new file the glob matches adds its targets; a file
// removed takes its targets with it.
func TestFileSDFollowsTheFiles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		fleet := filepath.Join(dir, "fleet.json")
		writeFile(t, fleet, `[{"targets": ["10.0.0.1:30000"]}]`)
		cfg := Config{FileSD: []FileSDConfig{{Files: []string{filepath.Join(dir, "*.json")}, NamePrefix: "llama-"}}}
		h := newHarness(t, cfg, nil, nil, nil)
		start := time.Now()
		h.start(t)
		wantNames(t, h.next(t).targets, "llama-10.0.0.1:30000")

		writeFile(t, fleet, `[{"targets": ["10.0.0.1:30000", "10.0.0.3:30000"]}]`)
		u := h.next(t)
		if got := u.at.Sub(start); got < DefaultRefreshInterval || got > DefaultRefreshInterval+DefaultMinUpdateInterval {
			t.Errorf("change published after %v, want within a refresh interval and the update delay", got)
		}
		wantNames(t, u.targets, "llama-10.0.0.1:30000", "llama-10.0.0.3:30000")

		// The same targets written again: nothing to publish.
		writeFile(t, fleet, `[ {"targets": ["10.0.0.1:30000", "10.0.0.3:30000"]} ]`)
		h.none(t, 2*DefaultRefreshInterval)

		canary := filepath.Join(dir, "canary.json")
		writeFile(t, canary, `[{"targets": ["10.0.1.1:30000"]}]`)
		wantNames(t, h.next(t).targets, "llama-10.0.0.1:30000", "llama-10.0.0.3:30000", "llama-10.0.1.1:30000")

		if err := os.Remove(fleet); err != nil {
			t.Fatal(err)
		}
		u = h.next(t)
		wantNames(t, u.targets, "llama-10.0.1.1:30000")
		if gone := Removed(u.targets, nil); len(gone) != 1 {
			t.Errorf("Removed = %q", gone)
		}
		if n := h.logs.FilterMessage("target file gone; its targets are removed").Len(); n != 1 {
			t.Errorf("%d removal logs, want 1", n)
		}
	})
}

// A bad file keeps its last good targets: it is counted on every refresh
// and logged once per distinct error, and its fix is published.
func TestFileSDBadFileKeepsTheLastGoodTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		fleet := filepath.Join(dir, "fleet.yaml")
		writeFile(t, fleet, "- targets: ['10.0.0.1:30000', '10.0.0.2:30000']\n")
		h := newHarness(t, Config{FileSD: []FileSDConfig{{Files: []string{filepath.Join(dir, "*.yaml")}}}}, nil, nil, nil)
		h.start(t)
		wantNames(t, h.next(t).targets, "10.0.0.1:30000", "10.0.0.2:30000")

		// Half-written by an editor: not YAML.
		writeFile(t, fleet, "- targets: ['10.0.0.1:30000', \n")
		h.none(t, 3*DefaultRefreshInterval+time.Second) // three failed refreshes
		// Parsed, but a target without a port: the whole file is bad, so a
		// typo never drops part of the fleet silently.
		writeFile(t, fleet, "- targets: ['10.0.0.1:30000', '10.0.0.9']\n  labels: {role: decode}\n")
		h.none(t, 2*DefaultRefreshInterval)

		if got := testutil.ToFloat64(h.d.metrics.failures.WithLabelValues(SourceFileSD)); got != 5 {
			t.Errorf("refresh failures = %v, want 5", got)
		}
		logs := h.logs.FilterMessage("target file unreadable or invalid; keeping its last good targets").All()
		if len(logs) != 2 {
			t.Fatalf("%d failure logs, want 2 (one per distinct error)", len(logs))
		}
		if msg := logs[1].ContextMap()["error"].(string); !strings.Contains(msg, fleet+": [0].targets[1]: \"10.0.0.9\" is not host:port") {
			t.Errorf("the error does not name the file and the entry: %s", msg)
		}
		if kept := logs[1].ContextMap()["kept"]; kept != int64(2) {
			t.Errorf("kept = %v, want 2", kept)
		}

		writeFile(t, fleet, "- targets: ['10.0.0.2:30000']\n")
		wantNames(t, h.next(t).targets, "10.0.0.2:30000")
		if n := h.logs.FilterMessage("target file valid again").Len(); n != 1 {
			t.Errorf("%d recovery logs, want 1", n)
		}
	})
}

// A file bad from the start has nothing to keep: the others are
// published without it.
func TestFileSDBadFileAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "a.json"), `[{"targets": ["10.0.0.1:30000"]}]`)
		for name, content := range map[string]string{
			"b.json": `[{"targets": ["10.0.0.2:30000"], "lables": {}}]`,                    // unknown key
			"c.json": `[{"targets": ["10.0.0.3:30000"], "labels": {"kind": "router"}}]`,    // unknown kind
			"d.json": `[{"targets": ["http://10.0.0.4:30000"]}]`,                           // a URL
			"e.json": `[{"targets": ["10.0.0.5:30000"], "labels": {"model-name": "x"}}]`,   // bad label name
			"f.json": `[{"targets": ["10.0.0.6:30000"], "labels": {"__scheme__": "ftp"}}]`, // bad scheme
		} {
			writeFile(t, filepath.Join(dir, name), content)
		}
		h := newHarness(t, Config{FileSD: []FileSDConfig{{Files: []string{filepath.Join(dir, "*.json")}}}}, nil, nil, nil)
		h.start(t)
		wantNames(t, h.next(t).targets, "10.0.0.1:30000")
		if got := testutil.ToFloat64(h.d.metrics.failures.WithLabelValues(SourceFileSD)); got != 5 {
			t.Errorf("refresh failures = %v, want 5", got)
		}
	})
}

// Static targets win over file_sd, which wins over DNS.
func TestFileSDPrecedence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "t.json"), `[{"targets": ["10.0.0.1:30000", "10.0.0.2:30000"], "labels": {"role": "file"}}]`)
		r := newFakeResolver()
		r.hosts["sglang.svc"] = []string{"10.0.0.2", "10.0.0.3"}
		static := []scrape.Target{{Name: "10.0.0.1:30000", URL: "http://10.0.0.1:30000/metrics", Kind: scrape.KindEngine, Labels: map[string]string{"role": "static"}}}
		cfg := Config{FileSD: []FileSDConfig{{Files: []string{filepath.Join(dir, "*.json")}}}, DNS: []DNSConfig{{Names: []string{"sglang.svc"}}}}
		h := newHarness(t, cfg, static, nil, r)
		h.start(t)
		u := h.next(t)
		wantNames(t, u.targets, "10.0.0.1:30000", "10.0.0.2:30000", "10.0.0.3:30000")
		if find(t, u.targets, "10.0.0.1:30000").Labels["role"] != "static" || find(t, u.targets, "10.0.0.2:30000").Labels["role"] != "file" {
			t.Errorf("precedence: %+v", u.targets)
		}
	})
}
