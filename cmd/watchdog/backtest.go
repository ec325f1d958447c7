package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/backtest"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/recording"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

const backtestUsage = `usage: watchdog backtest --recording FILE [--config FILE] [--output text|json|markdown]

Replays a recording of watchdog record through the daemon's own window, detectors,
correlation and alert timing, and prints what would have paged, updated and resolved:
time, class, severity, replica, headline, evidence and the integrations the routes would
have sent it to. Nothing is sent.

The recording's own settings (detectors, alerts, correlation, routes) are used; --config
FILE is decoded over them, so a changed threshold can be tried on the recorded history.

flags:
`

// backtestCmd runs `watchdog backtest`.
func backtestCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), backtestUsage)
		fs.PrintDefaults()
	}
	recPath := fs.String("recording", "", "the recording to replay (watchdog record --out)")
	cfgPath := fs.String("config", "", "YAML decoded over the recording's settings (the watchdog's config file layout)")
	output := fs.String("output", "text", "report format: text, json or markdown")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: backtest: %v", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: backtest: unexpected arguments %q", errUsage, fs.Args())
	case *recPath == "":
		return fmt.Errorf("%w: backtest: --recording FILE is required", errUsage)
	case *output != "text" && *output != "json" && *output != "markdown":
		return fmt.Errorf("%w: backtest: --output %q is not one of text, json, markdown", errUsage, *output)
	}

	f, err := os.Open(*recPath)
	if err != nil {
		return fmt.Errorf("backtest: %w", err)
	}
	defer f.Close()
	rd, err := recording.NewReader(f)
	if err != nil {
		return fmt.Errorf("backtest: %s: %w", *recPath, err)
	}
	cfg, err := replaySettings(rd.Header().Settings, *cfgPath)
	if err != nil {
		return fmt.Errorf("backtest: %w", err)
	}
	res, err := backtest.Run(backtest.Recording(rd), backtest.Settings{
		ScrapeInterval: cfg.Scrape.Interval,
		MaxSeries:      cfg.Scrape.MaxSeries,
		Detectors:      cfg.Detectors,
		Alerts:         cfg.Alerts,
		Correlation:    cfg.Correlation,
		Links:          alert.Links{ExternalURL: cfg.ExternalURL, Runbooks: cfg.Runbooks},
	})
	if err != nil {
		return fmt.Errorf("backtest: %s: %w", *recPath, err)
	}
	routes := notify.RouteConfig{Routes: cfg.Notify.Routes}
	report := backtest.NewReport(res, routes.Match)
	switch *output {
	case "json":
		return report.WriteJSON(stdout)
	case "markdown":
		return report.WriteMarkdown(stdout)
	}
	return report.WriteText(stdout)
}

// replaySettings are the defaults, then the recording's settings, then the
// file at path (when given), with the sections a replay uses validated as
// the daemon validates them (a replay has no targets of its own).
func replaySettings(recorded, path string) (config.Config, error) {
	cfg, err := config.Parse(config.Default(), []byte(recorded))
	if err != nil {
		return config.Config{}, fmt.Errorf("the recording's settings: %w", err)
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return config.Config{}, fmt.Errorf("--config: %w", err)
		}
		if cfg, err = config.Parse(cfg, data); err != nil {
			return config.Config{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	var errs []error
	if cfg.Scrape.Interval <= 0 {
		errs = append(errs, fmt.Errorf("scrape.interval: must be positive, got %s", cfg.Scrape.Interval))
	}
	if cfg.Scrape.MaxSeries <= 0 {
		errs = append(errs, errors.New("scrape.max_series: must be positive"))
	}
	errs = append(errs, cfg.Detectors.Validate(), cfg.Correlation.Validate(), cfg.Alerts.Validate("alerts"))
	if err := (notify.RouteConfig{Routes: cfg.Notify.Routes}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("notify.%w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return config.Config{}, fmt.Errorf("settings:\n%w", err)
	}
	return cfg, nil
}
