package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/configs"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/internal/tick"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// demoStory says, for each scenario phase, what the simulated fleet is
// going through, so the reader can match it with what the watchdog reports.
var demoStory = map[string]string{
	"healthy":               "healthy load on every replica",
	sim.ClassPreemptStorm:   "a batch job of long documents lands on sim-0: its KV pool fills and the scheduler starts retracting requests",
	"recovery":              "load back to normal; incidents should resolve",
	sim.ClassCacheCollapse:  "sim-1's clients put a timestamp at the top of the system prompt: no two prompts share a prefix any more",
	"latency_blip":          "a short traffic burst slows sim-2 down",
	sim.ClassRetryAvalanche: "sim-2's clients time out after 8 s and retry at once: the retries keep the replica overloaded",
	sim.ClassGPUThermal:     "sim-1's GPU loses its cooling: the GPU throttles itself (HW thermal slowdown) and decodes at half speed",
	sim.ClassCrash:          "sim-0's process dies (as an OOM kill would) and restarts with every counter at zero; the router fails the requests it held (502) and takes sim-0 out of rotation",
}

// demoFleet is the simulated fleet of the demo, its scenario starting at
// start.
func demoFleet(start time.Time) sim.FleetConfig {
	return sim.FleetConfig{Seed: 1, Start: start, Scenario: sim.DemoScenario(1), Warmup: time.Minute, GPU: sim.GPUConfig{NoPodLabels: true}}
}

// demo runs the real daemon against an embedded simulated fleet on
// loopback. dio carries the streams and, for tests, the network and the
// integrations standing in for the dry-run printers.
func demo(ctx context.Context, env map[string]string, dio daemonIO) error {
	stdout := dio.stdout
	base, err := demoConfig()
	if err != nil {
		return err
	}

	listen := dio.listen
	if listen == nil {
		listen = net.Listen
	}
	start := time.Now()
	fleet := sim.NewFleet(demoFleet(start))
	var servers []*http.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	serve := func(h http.Handler) (string, error) {
		ln, err := listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go srv.Serve(ln)
		return "http://" + ln.Addr().String(), nil
	}
	if err := serveFleet(fleet, serve, &base); err != nil {
		return err
	}

	load := func() (config.Config, error) { return config.LoadWithFlags(base, env, dio.flags) }
	cfg, err := load()
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}

	out := &lockedWriter{w: stdout}
	fmt.Fprintf(out, "sglang-watchdog demo: %d simulated SGLang replicas behind a model gateway, each on a GPU node with dcgm-exporter, on loopback; the scenario takes about 7 minutes. Ctrl-C to stop.\n", len(fleet.Replicas()))
	for _, t := range cfg.Targets {
		u, err := config.MetricsURL(t.URL)
		if err != nil {
			return fmt.Errorf("target %s: %w", t.Name, err)
		}
		fmt.Fprintf(out, "  %-10s %s\n", t.Name, u)
	}

	dio.alertsOut, dio.load = out, load
	dio.started = func(addr string) {
		fmt.Fprintf(out, "watchdog listening on http://%s  (open it for the workspace; also /api/v1/watchdog/alerts, /api/v1/incidents, /silences, /runbooks/, /metrics)\n\n", addr)
	}
	// Without Slack or PagerDuty credentials the demo prints what it would
	// have sent to them, so the routing is visible too. An integration of
	// that name given in dio takes the printer's place.
	if cfg.Notify.Slack.BotToken == "" && cfg.Notify.Slack.WebhookURL == "" && !hasIntegration(dio.extraIntegrations, notify.IntegrationSlack) {
		dio.extraIntegrations = append(dio.extraIntegrations, notify.Integration{Name: notify.IntegrationSlack, Notifier: dryRun{name: "Slack", w: out}})
	}
	if cfg.Notify.PagerDuty.RoutingKey == "" && !hasIntegration(dio.extraIntegrations, notify.IntegrationPagerDuty) {
		dio.extraIntegrations = append(dio.extraIntegrations, notify.Integration{Name: notify.IntegrationPagerDuty, Notifier: dryRun{name: "PagerDuty", w: out}})
	}

	simCtx, stopSim := context.WithCancel(ctx)
	defer stopSim()
	var wg sync.WaitGroup
	wg.Go(func() { driveFleet(simCtx, fleet, out) })
	err = daemon(ctx, cfg, dio)
	stopSim()
	wg.Wait()
	if err == nil || errors.Is(err, context.Canceled) {
		fmt.Fprintln(out, "demo stopped.")
		return nil
	}
	return err
}

// serveFleet serves every part of the simulated fleet through serve and
// adds them to cfg as targets: the replicas (engines), the model gateway
// in front of them (gateway "router", naming each worker by the URL it is
// served at) and each node's dcgm-exporter (kind gpu). The simulated
// exporters carry no pod labels (the replicas are static targets, not
// pods), so cfg's correlation.gpu_targets maps each node's GPU 0 to its
// replica.
func serveFleet(fleet *sim.Fleet, serve func(http.Handler) (string, error), cfg *config.Config) error {
	first := len(cfg.Targets)
	for i, name := range fleet.Replicas() {
		url, err := serve(fleet.Handler(i))
		if err != nil {
			return fmt.Errorf("simulated replica %s: %w", name, err)
		}
		cfg.Targets = append(cfg.Targets, config.Target{Name: name, URL: url, Kind: "engine"})
	}
	workers := slices.Clone(cfg.Targets[first:])
	url, err := serve(fleet.GatewayHandler(func(i int) string { return workers[i].URL }))
	if err != nil {
		return fmt.Errorf("simulated gateway: %w", err)
	}
	cfg.Targets = append(cfg.Targets, config.Target{Name: "router", URL: url + "/metrics", Kind: "gateway"})
	for i, node := range fleet.Nodes() {
		url, err := serve(fleet.GPUHandler(i))
		if err != nil {
			return fmt.Errorf("simulated dcgm-exporter on %s: %w", node, err)
		}
		cfg.Targets = append(cfg.Targets, config.Target{Name: node, URL: url + "/metrics", Kind: "gpu"})
		cfg.Correlation.GPUTargets = append(cfg.Correlation.GPUTargets, correlate.GPUTarget{Target: workers[i].Name, Node: node, GPUs: []int{0}})
	}
	return nil
}

// demoConfig is the demo's configuration before its targets are added.
func demoConfig() (config.Config, error) {
	cfg, err := config.Parse(config.Default(), configs.Demo())
	if err != nil {
		return config.Config{}, fmt.Errorf("embedded demo config: %w", err)
	}
	return cfg, nil
}

func hasIntegration(ins []notify.Integration, name string) bool {
	return slices.ContainsFunc(ins, func(in notify.Integration) bool { return in.Name == name })
}

// driveFleet steps the simulation in real time and narrates phase changes.
func driveFleet(ctx context.Context, fleet *sim.Fleet, out io.Writer) {
	last := ""
	begin := time.Now()
	tick.Every(ctx, 100*time.Millisecond, func(now time.Time) {
		fleet.Advance(now)
		if p := fleet.Phase(now); p != last {
			last = p
			elapsed := now.Sub(begin).Truncate(time.Second)
			fmt.Fprintf(out, "── %5s scenario: %s — %s\n", elapsed, p, demoStory[p])
		}
	})
}

// dryRun stands in for an integration without credentials: it prints one
// line per event it would have sent, numbered as the page it belongs to
// (deliveries run beside the console, so the line can come first).
type dryRun struct {
	name string
	w    io.Writer
}

func (d dryRun) Notify(_ context.Context, ev notify.Event) error {
	fmt.Fprintf(d.w, "   [would send to %s] %s %s %s on %s #%d (dedup key %s)\n", d.name, ev.Kind, ev.Severity, ev.Class, ev.Replica, ev.Seq, ev.Fingerprint)
	return nil
}

// lockedWriter serialises writes from the narrator and the notifiers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
