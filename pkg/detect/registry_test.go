package detect_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/backtest"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
	"github.com/sglang-watchdog/sglang-watchdog/internal/runbook"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// A detector is its file and one registry line. queue_backlog is a whole
// detector kept in queuebacklog_test.go; one line adds it to the daemon's
// Catalog, and with nothing else it is configured (its YAML section,
// decoded strictly), run (the scraper keeps what it reads and it finds the
// backlog), paged (the replay of the daemon's own path sends its page) and
// documented (its runbook page served, its row in the class table).
func TestADetectorIsItsFileAndOneRegistryLine(t *testing.T) {
	reg := append(detect.Registry(), detect.QueueBacklogEntry())

	// Configured.
	base := config.Default()
	base.Detectors = reg.DefaultConfig()
	cfg, err := config.Parse(base, []byte("detectors:\n  queue_backlog:\n    min_queued: 40\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Targets = []config.Target{{Name: "r0", URL: "http://127.0.0.1:30000"}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := detect.Get[detect.QueueBacklogConfig](cfg.Detectors); !got.Enabled || got.MinQueued != 40 || got.Range != 2*time.Minute {
		t.Errorf("settings %+v, want the defaults with min_queued 40", got)
	}
	for doc, want := range map[string]string{
		"detectors:\n  queue_backlog:\n    min_queud: 40\n": "line 3: detectors.queue_backlog.min_queud: no such field",
		"detectors:\n  queue_backlog: [40]\n":               "line 2: detectors.queue_backlog: a list where a mapping of its fields is expected",
	} {
		if _, err := config.Parse(base, []byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
	bad, err := config.Parse(base, []byte("detectors:\n  queue_backlog:\n    min_queued: -1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Detectors.Validate(); err == nil || !strings.Contains(err.Error(), "detectors.queue_backlog.min_queued: must be positive") {
		t.Errorf("min_queued -1: %v", err)
	}
	// The daemon's own registry does not know it.
	if _, err := config.Parse(config.Default(), []byte("detectors:\n  queue_backlog: {}\n")); err == nil || !strings.Contains(err.Error(), "detectors.queue_backlog: no such detector") {
		t.Errorf("the daemon's registry: %v", err)
	}

	// Run.
	ds, err := detect.New(cfg.Detectors)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ds, func(d detect.Detector) bool { return d.Class() == detect.QueueBacklog }) {
		t.Fatal("New does not build queue_backlog")
	}
	keep := assess.Reads(cfg.Detectors)
	if !slices.Contains(keep, series.NumQueueReqs) {
		t.Errorf("the scraper would drop %s, which queue_backlog reads", series.NumQueueReqs)
	}

	// Paged: a replica whose queue holds 3 requests, then 60 from minute
	// 10 on, replayed through the window, the assessment, the alert
	// tracker and the evaluation loop. (The capture's counters stand
	// still, so engine_hang pages too, as its own incident.)
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	const interval = 5 * time.Second
	backlogAt := start.Add(10 * time.Minute)
	end := start.Add(20 * time.Minute)
	dec := scrape.NewKeepingDecoder(keep)
	var scrapes []series.Scrape
	for at := start; at.Before(end); at = at.Add(interval) {
		queued := 3.0
		if !at.Before(backlogAt) {
			queued = 60
		}
		groups, err := dec.Decode(exposition(t, queued), 0)
		if err != nil {
			t.Fatal(err)
		}
		scrapes = append(scrapes, series.Scrape{Target: "r0", Kind: "engine", At: at, Duration: time.Millisecond, Groups: groups})
	}
	res, err := backtest.Run(backtest.Scrapes(scrapes, start, end, cfg.Evaluation.Interval), backtest.Settings{
		ScrapeInterval: interval, Detectors: cfg.Detectors, Alerts: cfg.Alerts, Correlation: cfg.Correlation,
		Links: alert.Links{ExternalURL: "https://watchdog.example.internal"},
	})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Events, func(ev notify.Event) bool {
		return ev.Class == string(detect.QueueBacklog) && ev.Kind == notify.KindTrigger
	})
	if i < 0 {
		var got []string
		for _, ev := range res.Events {
			got = append(got, ev.Class+" "+string(ev.Kind))
		}
		t.Fatalf("no queue_backlog page; the replay sent %v", got)
	}
	ev := res.Events[i]
	if earliest := backlogAt.Add(2*time.Minute + cfg.Alerts.For); ev.At.Before(earliest) {
		t.Errorf("paged at %s, before the backlog held its range and the alert its for (%s)", ev.At, earliest)
	}
	page := notify.FormatText(ev)
	for _, want := range []string{"At least 60 requests queued throughout the last 2m", "fewest queued requests",
		"https://watchdog.example.internal/runbooks/queue_backlog"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q:\n%s", want, page)
		}
	}
	if ev.Severity != detect.Warning {
		t.Errorf("severity %s", ev.Severity)
	}

	// Documented: its runbook page, rendered with the running settings and
	// reached from the on-call workflow; its row in the class table; its
	// section in configs/watchdog.yaml's.
	book, err := runbook.New(cfg.Detectors, os.DirFS("testdata/runbooks"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(book)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/runbooks/queue_backlog")
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), "is at least\n40 (<code>detectors.queue_backlog.min_queued</code>)") {
		t.Errorf("GET /runbooks/queue_backlog: %d\n%s", resp.StatusCode, body.String())
	}
	if workflow, _ := book.Markdown("triage"); !strings.Contains(workflow, "- [Queue backlog](queue_backlog): ") {
		t.Error("the on-call workflow does not reach queue_backlog")
	}
	table := reg.ClassTable()
	if !strings.Contains(table, "\n| `queue_backlog` | warning | requests that never leave the queue | `sglang:num_queue_reqs` at or above") {
		t.Errorf("class table:\n%s", table)
	}
	if !strings.Contains(reg.SettingsYAML(), "\n  queue_backlog:\n    enabled: true\n    range: 2m ") {
		t.Errorf("settings:\n%s", reg.SettingsYAML())
	}
	if !strings.Contains(reg.SettingsTables(), "\n`queue_backlog`: ") || !strings.Contains(reg.SettingsTables(), "\n| `min_queued` | `100` | ") {
		t.Errorf("settings tables:\n%s", reg.SettingsTables())
	}
	// Its causal position came with it: a hang explains the backlog, the
	// backlog the slow first tokens.
	backlog := detect.Finding{Class: detect.QueueBacklog, Layer: detect.LayerQueue}
	if !reg.Explains(detect.Finding{Class: detect.EngineHang}, backlog) || !reg.Explains(backlog, detect.Finding{Class: detect.QueueLatency}) ||
		reg.Explains(backlog, detect.Finding{Class: detect.EngineHang}) {
		t.Error("queue_backlog's causal position is not the one it declares")
	}
}

// queueLine is the queue gauge of the captured exposition.
var queueLine = regexp.MustCompile(`(?m)^(sglang:num_queue_reqs\{[^}]*\}) [0-9.]+$`)

// exposition is a current SGLang release's full /metrics with queued
// requests in the queue.
func exposition(t *testing.T, queued float64) []byte {
	t.Helper()
	b, err := fixture.SGLang(fixture.CurrentFull)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(queueLine.FindAll(b, -1)); n != 1 {
		t.Fatalf("%d queue gauges in %s", n, fixture.CurrentFull)
	}
	return queueLine.ReplaceAll(b, []byte("${1} "+strconv.FormatFloat(queued, 'f', -1, 64)))
}

// A registry line given twice is refused: its YAML section and its
// runbook would be ambiguous.
func TestACatalogNamesEachClassOnce(t *testing.T) {
	reg := append(detect.Registry(), detect.QueueBacklogEntry(), detect.QueueBacklogEntry())
	if err := reg.DefaultConfig().Validate(); err == nil || !strings.Contains(err.Error(), `detectors: class "queue_backlog" is registered twice`) {
		t.Errorf("Validate: %v", err)
	}
	if _, err := detect.New(reg.DefaultConfig()); err == nil {
		t.Error("New built a catalog with a class given twice")
	}
}
