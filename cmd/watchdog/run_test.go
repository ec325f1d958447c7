package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

// fakeReplica serves an SGLang exposition whose counters advance by a fixed
// amount per scrape, so rates depend only on the scrape interval. Its mode
// switches between healthy load and a preempt storm; restart zeroes every
// counter as a process restart does.
type fakeReplica struct {
	mu      sync.Mutex
	storm   bool
	scrapes int
	c       map[string]float64 // counters
	itl     []float64          // inter-token latency bucket counts (cumulative built at render)
	served  chan int           // receives the scrape count after each scrape (non-blocking)
}

var itlBounds = []string{"0.01", "0.05", "0.1", "0.5", "1.0", "+Inf"}

func newFakeReplica() *fakeReplica {
	return &fakeReplica{c: map[string]float64{}, itl: make([]float64, len(itlBounds)), served: make(chan int, 1024)}
}

func (f *fakeReplica) setStorm(on bool) { f.mu.Lock(); f.storm = on; f.mu.Unlock() }

func (f *fakeReplica) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c = map[string]float64{}
	f.itl = make([]float64, len(itlBounds))
}

func (f *fakeReplica) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f.mu.Lock()
	f.scrapes++
	// Steady traffic: 10 requests arrive and complete per scrape, 70% of
	// prompt tokens hit the prefix cache.
	for k, v := range map[string]float64{
		"http": 10, "done": 10, "prompt": 10000, "cached": 7000, "gen": 2000,
	} {
		f.c[k] += v
	}
	usage, queue, running := 0.5, 2.0, 20.0
	if f.storm {
		f.c["retracted"] += 5
		f.itl[3] += 40 // slow tokens
		usage, queue, running = 0.98, 30, 12
	} else {
		f.itl[0] += 40
	}
	n := f.scrapes
	var b strings.Builder
	lbl := `{engine_type="unified",model_name="test/model",moe_ep_rank="0",pp_rank="0",tp_rank="0"}`
	tok := `{model_name="test/model"}`
	g := func(name string, v float64) {
		fmt.Fprintf(&b, "# TYPE sglang:%s gauge\nsglang:%s%s %g\n", name, name, lbl, v)
	}
	c := func(name, labels string, v float64) {
		fmt.Fprintf(&b, "# TYPE sglang:%s counter\nsglang:%s%s %g\n", name, name, labels, v)
	}
	g("num_running_reqs", running)
	g("num_queue_reqs", queue)
	g("token_usage", usage)
	c("num_retracted_requests_total", lbl, f.c["retracted"])
	c("prompt_tokens_total", tok, f.c["prompt"])
	c("cached_tokens_total", tok, f.c["cached"])
	c("generation_tokens_total", tok, f.c["gen"])
	c("num_requests_total", tok, f.c["done"])
	c("num_aborted_requests_total", tok, f.c["aborted"])
	fmt.Fprintf(&b, "# TYPE sglang:http_requests_total counter\nsglang:http_requests_total{endpoint=\"/v1/chat/completions\",method=\"POST\"} %g\n", f.c["http"])
	fmt.Fprintf(&b, "# TYPE sglang:inter_token_latency_seconds histogram\n")
	cum := 0.0
	for i, le := range itlBounds {
		cum += f.itl[i]
		fmt.Fprintf(&b, "sglang:inter_token_latency_seconds_bucket{le=%q,model_name=\"test/model\"} %g\n", le, cum)
	}
	fmt.Fprintf(&b, "sglang:inter_token_latency_seconds_sum%s %g\nsglang:inter_token_latency_seconds_count%s %g\n", tok, cum*0.05, tok, cum)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	io.WriteString(w, b.String())
	select {
	case f.served <- n:
	default:
	}
}

// waitScrapes blocks until the replica has served n more scrapes.
func (f *fakeReplica) waitScrapes(t *testing.T, n int) {
	t.Helper()
	f.mu.Lock()
	target := f.scrapes + n
	f.mu.Unlock()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-f.served:
			if got >= target {
				return
			}
		case <-deadline:
			t.Fatalf("replica not scraped %d more times within 30s", n)
		}
	}
}

// lines collects a stream line by line and lets tests wait for a line.
type lines struct {
	mu  sync.Mutex
	all []string
	ch  chan string
}

func collect(r io.Reader) *lines {
	l := &lines{ch: make(chan string, 4096)}
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			l.mu.Lock()
			l.all = append(l.all, sc.Text())
			l.mu.Unlock()
			l.ch <- sc.Text()
		}
		close(l.ch)
	}()
	return l
}

func (l *lines) waitFor(t *testing.T, what string, match func(string) bool) string {
	t.Helper()
	deadline := time.After(45 * time.Second)
	for {
		select {
		case s, ok := <-l.ch:
			if !ok {
				t.Fatalf("stream ended before %s", what)
			}
			if match(s) {
				return s
			}
		case <-deadline:
			t.Fatalf("no %s within 45s", what)
		}
	}
}

// end waits until the writer has closed the stream and every line it
// wrote has been read: only then does text hold the last of them.
func (l *lines) end(t *testing.T) {
	t.Helper()
	deadline := time.After(45 * time.Second)
	for {
		select {
		case _, ok := <-l.ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the stream did not end within 45s")
		}
	}
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}

const e2eConfig = `
scrape: {interval: 100ms}
evaluation: {interval: 100ms}
detectors:
  preempt_storm: {range: 2s, baseline: 5s, min_retractions_per_second: 1, critical_retractions_per_second: 2}
  retry_avalanche: {range: 2s, baseline: 5s, min_requests: 20}
  cache_collapse: {range: 2s, baseline: 5s, min_prompt_tokens: 1000, restart_grace: 3s}
  replica_down: {failures_to_page: 3, crash_loop_window: 10s}
  replica_restarted: {lookback: 2s}
alerts: {for: 300ms, keep_firing_for: 1s, resolved_retention: 1m, restore_grace: 2s}
`

const (
	secretToken = "xoxb-e2e-SECRET-token"
	secretKey   = "e2eSECRETroutingkey000000000000"
)

func getJSON(t *testing.T, url string, v any) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
	return string(body)
}

// TestEndToEnd runs the real daemon against three replicas served over
// HTTP and fake Slack and PagerDuty: a preempt storm pages and resolves, a
// restart raises no retry avalanche or cache collapse, and nothing leaks a
// secret.
func TestEndToEnd(t *testing.T) {
	reps := []*fakeReplica{newFakeReplica(), newFakeReplica(), newFakeReplica()}
	var targets []string
	for i, r := range reps {
		srv := httptest.NewServer(r)
		t.Cleanup(srv.Close)
		targets = append(targets, fmt.Sprintf("r%d=%s", i, srv.URL))
	}
	slackSrv := notifytest.NewSlackServer()
	t.Cleanup(slackSrv.Close)
	slackEvents := make(chan notifytest.Request, 100)
	slackSrv.Respond(func(_ int, r notifytest.Request) notifytest.Response {
		select {
		case slackEvents <- r:
		default: // the test reads only the first hundred
		}
		return notifytest.Response{}
	})
	pd := notifytest.NewPagerDutyServer()
	t.Cleanup(pd.Close)
	pdEvents := make(chan notifytest.Request, 100)
	pd.Respond(func(_ int, r notifytest.Request) notifytest.Response { pdEvents <- r; return notifytest.Response{} })

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "watchdog.yaml")
	if err := os.WriteFile(cfgPath, []byte(e2eConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"WATCHDOG_CONFIG":         cfgPath,
		"WATCHDOG_TARGETS":        strings.Join(targets, ","),
		"WATCHDOG_LISTEN_ADDRESS": "127.0.0.1:0",
		"WATCHDOG_STATE_DIR":      filepath.Join(dir, "state"),
		"SLACK_BOT_TOKEN":         secretToken,
		"SLACK_CHANNEL":           "#oncall",
		"SLACK_API_URL":           slackSrv.APIURL(),
		"PAGERDUTY_ROUTING_KEY":   secretKey,
		"PAGERDUTY_EVENTS_URL":    pd.EventsURL(),
	}
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	out, logs := collect(outR), collect(errR)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx, nil, env, outW, errW)
		outW.Close()
		errW.Close()
		done <- err
	}()
	t.Cleanup(func() { cancel(); <-done })

	startLine := logs.waitFor(t, "start log line", func(s string) bool { return strings.Contains(s, "watchdog started") })
	var started struct{ Listen string }
	if err := json.Unmarshal([]byte(startLine), &started); err != nil || started.Listen == "" {
		t.Fatalf("start line %q: %v", startLine, err)
	}
	base := "http://" + started.Listen

	// Healthy baseline, then a storm on r0.
	reps[0].waitScrapes(t, 30)
	reps[0].setStorm(true)
	logs.waitFor(t, "preempt_storm trigger", notified("preempt_storm", "r0", "trigger", ""))

	var api struct {
		Alerts []struct {
			Fingerprint, State, Class, Replica, Severity, Diagnosis string
			Evidence                                                []struct {
				Name  string
				Value float64
			}
			Emergency []string `json:"emergency_steps"`
		}
	}
	getJSON(t, base+"/api/v1/watchdog/alerts?state=firing", &api)
	var fp string
	for _, a := range api.Alerts {
		if a.Class == "preempt_storm" && a.Replica == "r0" {
			fp = a.Fingerprint
			if a.Severity != "critical" || len(a.Evidence) == 0 || len(a.Emergency) == 0 || a.Diagnosis == "" {
				t.Errorf("firing alert lacks diagnosis, evidence or steps: %+v", a)
			}
		}
	}
	if fp == "" {
		t.Fatalf("no firing preempt_storm on r0 in the API: %+v", api.Alerts)
	}
	waitPagerDuty(t, pdEvents, "trigger", fp)

	// Recovery resolves it, in the log, in PagerDuty (same dedup key) and
	// in Slack (the original message updated).
	reps[0].setStorm(false)
	logs.waitFor(t, "preempt_storm resolve", notified("preempt_storm", "r0", "resolve", ""))
	waitPagerDuty(t, pdEvents, "resolve", fp)
	getJSON(t, base+"/api/v1/watchdog/alerts?state=resolved&fingerprint="+fp, &api)
	if len(api.Alerts) != 1 {
		t.Errorf("resolved alert not listed: %+v", api.Alerts)
	}
	// Each integration delivers on its own worker: Slack's resolve may
	// land after PagerDuty's.
	waitSlack(t, slackEvents, func(r notifytest.Request) bool {
		return r.Method == "chat.update" && strings.Contains(strings.ToLower(r.Form.Get("text")), "resolved")
	})
	posts, updated := 0, false
	for _, r := range slackSrv.Requests() {
		if r.Method == "chat.postMessage" && r.Form.Get("thread_ts") == "" && strings.Contains(strings.ToLower(r.Form.Get("text")), "preempt") {
			posts++
		}
		if r.Method == "chat.update" && strings.Contains(strings.ToLower(r.Form.Get("text")), "resolved") {
			updated = true
		}
	}
	if posts != 1 || !updated {
		t.Errorf("slack: %d parent posts for the storm (want 1), resolve updated the parent: %v", posts, updated)
	}

	// A replica restart zeroes every counter: it may be reported as a
	// restart, but must not look like a retry avalanche or a cache collapse.
	reps[1].restart()
	logs.waitFor(t, "restart report on r1", notified("replica_restarted", "r1", "trigger", ""))
	reps[1].waitScrapes(t, 60) // 6 s: past every range and the restart lookback
	for _, n := range notifications(logs) {
		if n.Replica == "r1" && (n.Class == "retry_avalanche" || n.Class == "cache_collapse") {
			t.Errorf("restart raised %+v", n)
		}
		if n.Replica == "r2" {
			t.Errorf("healthy replica paged: %+v", n)
		}
	}

	// Nothing leaks a secret: not the output, the logs, the API or /metrics.
	surfaces := map[string]string{
		"alerts":              getJSON(t, base+"/api/v1/alerts", nil),
		"targets":             getJSON(t, base+"/api/v1/targets", nil),
		"watchdog targets":    getJSON(t, base+"/api/v1/watchdog/targets", nil),
		"alertmanager alerts": getJSON(t, base+"/api/v2/alerts", nil),
		"metrics":             getJSON(t, base+"/metrics", nil),
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run returned %v", err)
	}
	done <- nil // for the cleanup
	surfaces["stdout"], surfaces["stderr"] = out.text(), logs.text()
	for name, text := range surfaces {
		for _, secret := range []string{secretToken, secretKey} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains a secret", name)
			}
		}
	}
	if !strings.Contains(logs.text(), "watchdog stopped") {
		t.Error("no clean shutdown line")
	}
	// Production output is one stream of structured records: every line on
	// stderr is a JSON object, the notifications included, and nothing is
	// written to stdout.
	for i, line := range strings.Split(logs.text(), "\n") {
		var record map[string]any
		if err := json.Unmarshal([]byte(line), &record); err != nil {
			t.Errorf("stderr line %d is not a JSON record: %q", i+1, line)
		}
	}
	if len(notifications(logs)) == 0 {
		t.Error("no notification record on stderr")
	}
	if out.text() != "" {
		t.Errorf("stdout is not empty:\n%s", out.text())
	}
}

// notified matches the structured record the log integration writes for
// an event of class on replica of kind, whose summary contains summary.
func notified(class, replica, kind, summary string) func(string) bool {
	return func(s string) bool {
		var n notification
		return json.Unmarshal([]byte(s), &n) == nil && n.Msg == "notification" && n.Class == class &&
			n.Replica == replica && n.Kind == kind && strings.Contains(n.Summary, summary)
	}
}

func waitPagerDuty(t *testing.T, events <-chan notifytest.Request, action, dedup string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-events:
			var ev notifytest.PagerDutyEvent
			json.Unmarshal(r.Body, &ev)
			if ev.Action == action && ev.DedupKey == dedup {
				return
			}
		case <-deadline:
			t.Fatalf("PagerDuty got no %s for %s", action, dedup)
		}
	}
}

// waitSlack waits for a request to the fake Slack that matches.
func waitSlack(t *testing.T, events <-chan notifytest.Request, match func(notifytest.Request) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-events:
			if match(r) {
				return
			}
		case <-deadline:
			t.Fatal("Slack got no such request")
		}
	}
}

// TestReloadChangesThresholdsAndTargetsAndRejectsABrokenFile changes a
// threshold and the target list through the file plus POST /-/reload and
// SIGHUP; a broken file is rejected while the old configuration keeps
// running; a removed target's firing alert resolves as "target removed".
func TestReloadChangesThresholdsAndTargetsAndRejectsABrokenFile(t *testing.T) {
	r0, r1 := newFakeReplica(), newFakeReplica()
	s0, s1 := httptest.NewServer(r0), httptest.NewServer(r1)
	t.Cleanup(s0.Close)
	t.Cleanup(s1.Close)
	r0.setStorm(true)

	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "watchdog.yaml")
	write := func(minRetractions string, targets ...string) {
		t.Helper()
		var b strings.Builder
		b.WriteString(strings.Replace(e2eConfig, "min_retractions_per_second: 1, critical_retractions_per_second: 2",
			"min_retractions_per_second: "+minRetractions+", critical_retractions_per_second: "+minRetractions, 1))
		b.WriteString("targets:\n")
		for _, tg := range targets {
			name, url, _ := strings.Cut(tg, "=")
			fmt.Fprintf(&b, "  - name: %s\n    url: %s\n", name, url)
		}
		if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Start with a threshold the storm does not reach.
	write("1000", "r0="+s0.URL)

	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	out, logs := collect(outR), collect(errR)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// As main runs it: SIGHUP reloads.
		err := runCommand(ctx, []string{"--web.enable-lifecycle", "--config.watch-interval=0"}, map[string]string{"WATCHDOG_CONFIG": cfgPath, "WATCHDOG_LISTEN_ADDRESS": "127.0.0.1:0"},
			daemonIO{stdout: outW, stderr: errW, reload: reloads(ctx)})
		outW.Close()
		errW.Close()
		done <- err
	}()
	defer func() { cancel(); <-done }()
	startLine := logs.waitFor(t, "start", func(s string) bool { return strings.Contains(s, "watchdog started") })
	var started struct{ Listen string }
	json.Unmarshal([]byte(startLine), &started)
	base := "http://" + started.Listen
	reload := func() (int, string) {
		resp, err := http.Post(base+"/-/reload", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	r0.waitScrapes(t, 30) // 3 s of storm below the threshold: nothing pages
	if len(notifications(logs)) > 0 {
		t.Fatal("paged above the configured threshold")
	}

	// Calm down until the storm has left the baseline (range 2 s + baseline
	// 5 s), lower the threshold and add r1; the next storm pages.
	r0.setStorm(false)
	r0.waitScrapes(t, 80)
	write("1", "r0="+s0.URL, "r1="+s1.URL)
	if code, body := reload(); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	r0.setStorm(true)
	defer func() {
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", out.text(), logs.text())
		}
	}()
	logs.waitFor(t, "storm after the threshold change", notified("preempt_storm", "r0", "trigger", ""))
	r1.waitScrapes(t, 5)

	// A broken file is rejected, by the API and by SIGHUP; the old
	// configuration keeps running (r1 still scraped).
	os.WriteFile(cfgPath, []byte("scrape: {intervall: 1s}\n"), 0o600)
	if code, body := reload(); code != 400 || !strings.Contains(body, "intervall") {
		t.Fatalf("broken reload: %d %s", code, body)
	}
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	logs.waitFor(t, "SIGHUP rejection", func(s string) bool { return strings.Contains(s, "reload rejected") })
	r1.waitScrapes(t, 5)
	_, metrics := get(t, base+"/metrics")
	if !strings.Contains(metrics, "watchdog_config_last_reload_successful 0") || !strings.Contains(metrics, `watchdog_config_last_error_info{reason="parse"} 1`) {
		t.Error("failed reload, or why it failed, not visible in metrics")
	}

	// Removing r0 by SIGHUP resolves its firing alert as "target removed".
	write("1", "r1="+s1.URL)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	// The removal is applied before the reload is recorded as a success;
	// the log integration's queue writes the resolve concurrently, so the
	// two records come in either order.
	resolved, reloaded := notified("preempt_storm", "r0", "resolve", "target removed"), false
	seenResolve := false
	logs.waitFor(t, "reload recorded and target removed resolve", func(s string) bool {
		reloaded = reloaded || strings.Contains(s, "configuration reloaded")
		seenResolve = seenResolve || resolved(s)
		return reloaded && seenResolve
	})
	_, metrics = get(t, base+"/metrics")
	if !strings.Contains(metrics, "watchdog_config_last_reload_successful 1") || strings.Contains(metrics, `target="r0"`) {
		t.Error("after the good reload: success not recorded, or r0 still scraped")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
