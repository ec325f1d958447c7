package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/internal/backtest"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// The demo recorded by `watchdog record --demo` (the real daemon watching
// the simulated fleet through every incident class, in virtual time) and
// replayed by `watchdog backtest --recording` gives exactly the events the
// live run delivered to Slack and PagerDuty: same instants, kinds,
// severities, classes, replicas, headlines and evidence.
func TestBacktestOfDemoRecordingEqualsLiveRun(t *testing.T) {
	keepSignalMachineryOutOfBubble(t)
	path := filepath.Join(t.TempDir(), "demo.rec.gz")
	var live demoRun
	synctest.Test(t, func(t *testing.T) {
		live = runDemoInBubble(t, func(ctx context.Context, dio daemonIO) error {
			return recordCmd(ctx, []string{"--demo", "--out", path}, map[string]string{}, dio)
		})
	})
	if len(live.events) == 0 {
		t.Fatal("the live run delivered nothing: the harness is broken")
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recording of %s of the demo: %d bytes", live.end, info.Size())

	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"backtest", "--recording", path, "--output", "json"}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("backtest: %v\n%s", err, stderr.String())
	}
	var report backtest.Report
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("backtest --output json: %v\n%s", err, stdout.String())
	}

	// Each event once, as Slack received it: the default routes send it
	// every warning and critical event, and an integration may receive an
	// event under another kind (PagerDuty's first critical event of an
	// incident that began as a warning is its trigger).
	var want []string
	seen := map[string]bool{}
	for _, r := range live.events {
		key := fmt.Sprintf("%s/%d", r.ev.Fingerprint, r.ev.Seq)
		if r.integration == notify.IntegrationSlack && !seen[key] {
			seen[key] = true
			want = append(want, liveEventLine(r.ev))
		}
	}
	var got []string
	for _, e := range report.Events {
		if len(e.To) > 0 { // the live run's integrations see only routed events
			got = append(got, reportEventLine(e))
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("backtest timeline differs from the live run\nlive:\n%s\n\nbacktest:\n%s", strings.Join(want, "\n"), strings.Join(got, "\n"))
	}
	if report.Pages == 0 || report.Rounds == 0 {
		t.Errorf("report counts %d pages over %d rounds", report.Pages, report.Rounds)
	}
}

func liveEventLine(ev notify.Event) string {
	var evidence []string
	for _, f := range notify.Shown(ev.Evidence) {
		evidence = append(evidence, notify.FormatField(f))
	}
	return eventLine(ev.At, string(ev.Kind), ev.Severity.String(), ev.Class, ev.Replica, ev.Fingerprint, ev.Seq, notify.Headline(ev), evidence)
}

func reportEventLine(e backtest.ReportEvent) string {
	return eventLine(e.At, e.Kind, e.Severity.String(), e.Class, e.Replica, e.Fingerprint, e.Seq, e.Headline, e.Evidence)
}

func eventLine(at time.Time, kind, severity, class, replica, fingerprint string, seq uint64, headline string, evidence []string) string {
	return fmt.Sprintf("%s %s %s %s %s %s/%d %q %q", at.UTC().Format(time.RFC3339Nano), kind, severity, class, replica, fingerprint, seq, headline, evidence)
}

// Command-line mistakes are usage errors (exit 2); a recording that cannot
// be read is an error naming the file and what is wrong with it.
func TestBacktestAndRecordCommandErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.rec.gz")
	if err := os.WriteFile(corrupt, []byte("not gzip at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	future := filepath.Join(dir, "future.rec.gz")
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	fmt.Fprintln(gz, `{"format":"sglang-watchdog-recording","version":99}`)
	gz.Close()
	if err := os.WriteFile(future, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// A Prometheus that answers 503: the reader's error, naming the API.
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{args: []string{"backtest"}, usage: true, want: "give one of --recording FILE and --prometheus URL"},
		{args: []string{"backtest", "--recording", corrupt, "--prometheus", "http://p:9090"}, usage: true, want: "give one of"},
		{args: []string{"backtest", "--recording", corrupt, "--from", "2026-01-01T00:00:00Z"}, usage: true, want: "--from and --to go with --prometheus"},
		{args: []string{"backtest", "--prometheus", "http://p:9090", "--from", "yesterday", "--to", "2026-01-01T00:00:00Z"}, usage: true, want: `--from "yesterday" is not an RFC 3339 time`},
		{args: []string{"backtest", "--prometheus", "http://p:9090", "--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"}, usage: true, want: "is not before --to"},
		{args: []string{"backtest", "--prometheus", down.URL, "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"}, want: "backtest: " + down.URL + ": "},
		{args: []string{"backtest", "--recording", corrupt, "--output", "yaml"}, usage: true, want: `--output "yaml"`},
		{args: []string{"backtest", "--recording", corrupt, "extra"}, usage: true, want: "unexpected arguments"},
		{args: []string{"backtest", "--recording", filepath.Join(dir, "missing")}, want: "no such file"},
		{args: []string{"backtest", "--recording", corrupt}, want: corrupt + ": not a recording"},
		{args: []string{"backtest", "--recording", future}, want: "the file is version 99, this watchdog reads version 1"},
		{args: []string{"record"}, usage: true, want: "--out FILE is required"},
		{args: []string{"record", "--out", filepath.Join(dir, "x"), "--duration", "-1s"}, usage: true, want: "--duration"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, nil, &stdout, &stderr)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if got := exitCode(err) == 2; got != tc.usage {
				t.Errorf("usage error (exit 2) = %v, want %v: %v", got, tc.usage, err)
			}
		})
	}
}

// fakeHistory stands in for a Prometheus-compatible API: it returns its
// scrapes and keeps what it was asked for.
type fakeHistory struct {
	scrapes      []series.Scrape
	from, to     time.Time
	step         time.Duration
	url          string
	evalInterval time.Duration
	lookback     time.Duration // the detectors' look-back of the settings
}

func (f *fakeHistory) Range(_ context.Context, from, to time.Time, step time.Duration) ([]series.Scrape, error) {
	f.from, f.to, f.step = from, to, step
	return f.scrapes, nil
}

// --prometheus reads the range at the scrape interval of the settings, from
// the detectors' look-back before --from (baselines for the first round), and
// replays it with a round every evaluation interval: a replica that stops
// answering in the history is paged as down.
func TestBacktestFromPrometheusHistory(t *testing.T) {
	from := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	to := from.Add(10 * time.Minute)
	fake := &fakeHistory{}
	for at := from; at.Before(to); at = at.Add(10 * time.Second) {
		sc := series.Scrape{Target: "r1", Kind: "engine", At: at}
		if at.Sub(from) >= 2*time.Minute {
			sc.Reason, sc.Error = series.FailureRefused, "connection refused"
		}
		fake.scrapes = append(fake.scrapes, sc)
	}
	cfgFile := filepath.Join(t.TempDir(), "try.yaml")
	if err := os.WriteFile(cfgFile, []byte("scrape:\n  interval: 10s\nevaluation:\n  interval: 30s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := backtestCmd(context.Background(), []string{"--prometheus", "http://prom:9090", "--from", from.Format(time.RFC3339),
		"--to", to.Format(time.RFC3339), "--config", cfgFile, "--output", "json"}, &stdout, &stderr,
		func(url string, cfg config.Config) (historyReader, error) {
			fake.url, fake.evalInterval, fake.lookback = url, cfg.Evaluation.Interval, cfg.Detectors.MaxLookback()
			return fake, nil
		})
	if err != nil {
		t.Fatalf("backtest: %v\n%s", err, stderr.String())
	}
	if fake.url != "http://prom:9090" || fake.lookback <= 0 || !fake.from.Equal(from.Add(-fake.lookback)) || !fake.to.Equal(to) || fake.step != 10*time.Second || fake.evalInterval != 30*time.Second {
		t.Errorf("history opened at %q with evaluation %s and asked for %s..%s step %s", fake.url, fake.evalInterval, fake.from, fake.to, fake.step)
	}
	var report backtest.Report
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatal(err)
	}
	if report.Rounds != 21 || report.Scrapes != 60 {
		t.Errorf("%d rounds and %d scrapes, want 21 and 60", report.Rounds, report.Scrapes)
	}
	down := false
	for _, e := range report.Events {
		down = down || (e.Class == "replica_down" && e.Replica == "r1" && e.Kind == "trigger" && e.At.After(from.Add(2*time.Minute)))
	}
	if !down {
		t.Errorf("r1 stopped answering at +2m and was not paged down; events: %+v", report.Events)
	}
}

// watchdog record sends nothing: every integration that could page or
// ping, Alertmanager included, is off in the configuration it runs.
func TestRecordRunSendsNothing(t *testing.T) {
	cfg, err := config.Parse(config.Default(), []byte(`
targets: [{name: a, url: "http://127.0.0.1:1"}]
notify:
  slack: {bot_token: xoxb-1, channel: C1}
  pagerduty: {routing_key: k}
  alertmanager: {urls: ["http://127.0.0.1:9093"]}
heartbeat: {enabled: true, url: "http://127.0.0.1:1/ping"}
ha: {enabled: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := (&recordingRun{}).Restrict(cfg)
	if got.Notify.Slack != (config.Slack{}) || got.Notify.PagerDuty != (config.PagerDuty{}) || got.Notify.Alertmanager.Enabled() ||
		got.Heartbeat.Enabled || got.HA.Enabled || got.StateDir != "" {
		t.Errorf("a recording run keeps something that sends: %+v", got.Notify)
	}
}

// A recording's settings give a replay the recorded run's decisions: the
// detectors, alert timing, correlation and objectives decode back equal.
func TestRecordedSettingsReplayTheSameDecisions(t *testing.T) {
	cfg, err := config.Parse(config.Default(), []byte(sloDriftConfig))
	if err != nil {
		t.Fatal(err)
	}
	recorded, err := recordedSettings(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := replaySettings(recorded, "")
	if err != nil {
		t.Fatalf("replaying %s: %v", recorded, err)
	}
	// Compared as YAML: an empty list decodes where a nil one was.
	same := func(a, b any) bool {
		ya, errA := yaml.Marshal(a)
		yb, errB := yaml.Marshal(b)
		return errA == nil && errB == nil && string(ya) == string(yb)
	}
	for name, eq := range map[string]bool{
		"detectors":   same(got.Detectors, cfg.Detectors),
		"alerts":      same(got.Alerts, cfg.Alerts),
		"correlation": same(got.Correlation, cfg.Correlation),
		"slos":        same(got.SLOs, cfg.SLOs),
	} {
		if !eq {
			t.Errorf("%s differ after a round trip through the recording:\n%s", name, recorded)
		}
	}
	if len(got.SLOs.Objectives) != 1 || got.SLOs.Objectives[0].Threshold != 400*time.Millisecond {
		t.Errorf("objectives after the round trip: %+v", got.SLOs.Objectives)
	}
}
