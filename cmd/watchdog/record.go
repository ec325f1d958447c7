package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/heartbeat"
	"github.com/sglang-watchdog/sglang-watchdog/internal/recording"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

const recordUsage = `usage: watchdog record --out FILE [--duration D] [--demo]

Runs the watchdog on the configured targets (WATCHDOG_CONFIG, WATCHDOG_TARGETS), or with
--demo on the built-in simulated fleet, and writes every scrape as the window received it
and every evaluation round to FILE (gzip'd JSON lines, format in internal/recording). Replay it
with: watchdog backtest --recording FILE

Nothing is sent: Slack, PagerDuty and the heartbeat are off even when configured (events
go to the log only); alert state stays in memory (state_dir is not touched); HA leader
election is off; the HTTP server listens on a free port of 127.0.0.1. The file also
holds the detector, alert, correlation and route settings (never credentials).
Stops after --duration, or at Ctrl-C.

flags:
`

// recordCmd runs `watchdog record`.
func recordCmd(ctx context.Context, args []string, env map[string]string, dio daemonIO) error {
	fs := flag.NewFlagSet("record", flag.ContinueOnError)
	fs.SetOutput(dio.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), recordUsage)
		fs.PrintDefaults()
	}
	out := fs.String("out", "", "the recording to write (required)")
	duration := fs.Duration("duration", 0, "stop after this long (0: at Ctrl-C)")
	demoFleet := fs.Bool("demo", false, "record the built-in simulated fleet (watchdog demo) instead of the configured targets")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: record: %v", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: record: unexpected arguments %q", errUsage, fs.Args())
	case *out == "":
		return fmt.Errorf("%w: record: --out FILE is required", errUsage)
	case *duration < 0:
		return fmt.Errorf("%w: record: --duration must not be negative", errUsage)
	}
	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	defer f.Close()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	rec := &recordingRun{file: f, name: *out}
	dio.record = rec
	fmt.Fprintf(dio.stdout, "recording to %s; nothing is sent to Slack, PagerDuty or a heartbeat receiver while recording\n", *out)
	if *demoFleet {
		err = demo(ctx, env, dio)
	} else {
		load := func() (config.Config, error) { return config.Load(config.Default(), env) }
		var cfg config.Config
		if cfg, err = load(); err != nil {
			return fmt.Errorf("configuration:\n%w", err)
		}
		dio.load = load
		err = daemon(ctx, cfg, dio)
	}
	if cerr := rec.close(); cerr != nil {
		return errors.Join(err, cerr)
	}
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("record: %s: %w", *out, err)
	}
	fmt.Fprintf(dio.stdout, "recorded %s\n", *out)
	return nil
}

// recordingRun is watchdog record's part in the daemon: it takes the paging
// and the shared state out of the configuration and taps the window store.
type recordingRun struct {
	file io.Writer
	name string
	w    *recording.Writer
}

// restrict turns off everything that would reach people or other copies.
func (r *recordingRun) Restrict(cfg config.Config) config.Config {
	cfg.Notify.Slack = config.Slack{}
	cfg.Notify.PagerDuty = config.PagerDuty{}
	cfg.Notify.Alertmanager = config.Alertmanager{}
	cfg.Heartbeat = heartbeat.Config{}
	cfg.HA.Enabled = false
	cfg.StateDir = ""
	cfg.ListenAddress = "127.0.0.1:0"
	return cfg
}

// start writes the header and returns the tap in front of store and the
// observer of the evaluation rounds.
func (r *recordingRun) Start(cfg config.Config, store scrape.Appender, now time.Time) (scrape.Appender, eval.RoundObserver, error) {
	settings, err := recordedSettings(cfg)
	if err != nil {
		return nil, nil, err
	}
	w, err := recording.NewWriter(r.file, recording.Header{Recorder: buildVersion(), Started: now.UTC(), Settings: settings})
	if err != nil {
		return nil, nil, fmt.Errorf("record: %s: %w", r.name, err)
	}
	r.w = w
	return w.Tap(store), w, nil
}

func (r *recordingRun) close() error {
	if r.w == nil {
		return nil
	}
	if err := r.w.Close(); err != nil {
		return fmt.Errorf("record: %s: %w", r.name, err)
	}
	return nil
}

// decisionSettings are the configuration sections a replay needs to decide
// as the recorded run did, in the configuration file's layout.
type decisionSettings struct {
	Scrape      config.Scrape     `yaml:"scrape"`
	Evaluation  config.Evaluation `yaml:"evaluation"`
	Detectors   detect.Config     `yaml:"detectors"`
	Alerts      alert.Config      `yaml:"alerts"`
	Correlation correlate.Config  `yaml:"correlation"`
	SLOs        slo.Config        `yaml:"slos"`
	Notify      struct {
		Routes []notify.Route `yaml:"routes"`
	} `yaml:"notify"`
	Runbooks map[string]string `yaml:"runbooks,omitempty"`
}

func recordedSettings(cfg config.Config) (string, error) {
	s := decisionSettings{Scrape: cfg.Scrape, Evaluation: cfg.Evaluation, Detectors: cfg.Detectors, Alerts: cfg.Alerts,
		Correlation: cfg.Correlation, SLOs: cfg.SLOs, Runbooks: cfg.Runbooks}
	s.Notify.Routes = cfg.Notify.Routes
	b, err := yaml.Marshal(s)
	if err != nil {
		return "", fmt.Errorf("record: settings: %w", err)
	}
	return string(b), nil
}
