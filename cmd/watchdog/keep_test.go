package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// scrapedSamples runs the daemon with yaml against one replica serving
// body and returns watchdog_scrape_samples of it, from the daemon's own
// /metrics, once it has been scraped.
func scrapedSamples(t *testing.T, yaml string, body []byte) float64 {
	t.Helper()
	samples := -1.0
	synctest.Test(t, func(t *testing.T) {
		var srv *http.Server
		run := startDaemonWith(t, yaml, nil, func(network *memnet.Network, cfg *config.Config) {
			ln, err := network.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain; version=0.0.4")
				w.Write(body)
			})}
			go srv.Serve(ln)
			cfg.Targets = append(cfg.Targets, config.Target{Name: "full", URL: "http://" + ln.Addr().String(), Kind: "engine"})
		})
		time.Sleep(2500 * time.Millisecond) // two scrape intervals
		resp, err := run.api.Get("http://" + run.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		own, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for line := range strings.SplitSeq(string(own), "\n") {
			if v, ok := strings.CutPrefix(line, `watchdog_scrape_samples{target="full"} `); ok {
				samples, _ = strconv.ParseFloat(v, 64)
			}
		}
		if err := run.stop(); err != nil {
			t.Error(err)
		}
		srv.Close()
	})
	return samples
}

// By default the daemon keeps exactly the series of the families its
// readers declare (assess.Reads) and drops the rest while parsing;
// scrape.keep_all_families keeps every series.
func TestDaemonKeepsOnlyReadFamilies(t *testing.T) {
	body, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := scrape.NewDecoder().Decode(body, 0)
	if err != nil {
		t.Fatal(err)
	}
	reads := assess.Reads(config.Default().Detectors)
	all, read := 0, 0
	for _, g := range groups {
		for _, s := range g.Samples {
			all++
			base := s.Name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				base = strings.TrimSuffix(base, suf)
			}
			if slices.Contains(reads, s.Name) || slices.Contains(reads, base) {
				read++
			}
		}
	}
	const cfg = `
log_level: warn
evaluation: {interval: 1s}
scrape: {interval: 1s, health_probe: {enabled: false}, keep_all_families: %v}
`
	if got := scrapedSamples(t, fmt.Sprintf(cfg, false), body); got != float64(read) {
		t.Errorf("kept %v series of the full exposition, want the %d of the families read (of %d)", got, read, all)
	}
	if got := scrapedSamples(t, fmt.Sprintf(cfg, true), body); got != float64(all) {
		t.Errorf("kept %v series with keep_all_families, want all %d", got, all)
	}
	if read >= all {
		t.Errorf("every one of the %d series is read: the test shows no filtering", all)
	}
}
