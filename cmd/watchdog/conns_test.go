package main

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
)

// The daemon keeps one connection to each replica across scrapes, past a
// hundred replicas too (a clone of Go's default transport keeps 100 idle
// connections in all, so every scrape dialed anew), and asks each for its
// exposition uncompressed.
func TestDaemonKeepsAConnectionPerReplica(t *testing.T) {
	const replicas = 150
	synctest.Test(t, func(t *testing.T) {
		var (
			mu        sync.Mutex
			dials     int
			requests  int
			encodings = map[string]int{}
			servers   []*http.Server
		)
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			requests++
			encodings[r.Header.Get("Accept-Encoding")]++
			mu.Unlock()
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte("sglang:num_running_reqs 1\n"))
		})
		countDials := func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				mu.Lock()
				dials++
				mu.Unlock()
			}
		}
		run := startDaemonWith(t, `
log_level: warn
evaluation: {interval: 1s}
scrape: {interval: 1s, health_probe: {enabled: false}}
`, nil, func(network *memnet.Network, cfg *config.Config) {
			for i := range replicas {
				ln, err := network.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: handler, ConnState: countDials}
				servers = append(servers, srv)
				go srv.Serve(ln)
				cfg.Targets = append(cfg.Targets, config.Target{Name: fmt.Sprintf("r%03d", i), URL: "http://" + ln.Addr().String(), Kind: "engine"})
			}
		})
		time.Sleep(3500 * time.Millisecond) // three scrape intervals
		if err := run.stop(); err != nil {
			t.Error(err)
		}
		for _, srv := range servers {
			srv.Close()
		}
		mu.Lock()
		defer mu.Unlock()
		if requests < 3*replicas {
			t.Fatalf("%d scrapes of %d replicas in three intervals", requests, replicas)
		}
		if dials != replicas {
			t.Errorf("%d connections for %d scrapes of %d replicas, want one a replica", dials, requests, replicas)
		}
		if encodings["identity"] != requests {
			t.Errorf("Accept-Encoding of the scrapes: %v, want identity for all %d", encodings, requests)
		}
	})
}
