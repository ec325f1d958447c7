package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/backtest"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/promsource"
	"github.com/sglang-watchdog/sglang-watchdog/internal/recording"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

const backtestUsage = `usage: watchdog backtest --recording FILE [--config FILE] [--output text|json|markdown]
       watchdog backtest --prometheus URL --from TIME --to TIME [--config FILE] [--output ...]

Replays history through the daemon's own window, detectors, correlation and alert timing,
and prints what would have paged, updated and resolved: time, class, severity, replica,
headline, evidence and the integrations the routes would have sent it to. Nothing is sent.

--recording replays a file of watchdog record with the recording's own settings (detectors,
alerts, correlation, routes); --config FILE is decoded over them, so a changed threshold can
be tried on the recorded history. --prometheus reads the range from a Prometheus-compatible
API at the scrape interval and evaluates every evaluation interval, with the defaults and
--config FILE as settings. TIME is RFC 3339 (2026-01-02T15:04:05Z).

flags:
`

// historyReader reads what the scraper would have produced at each step
// for each replica from a Prometheus-compatible API (internal/promsource).
type historyReader interface {
	Range(ctx context.Context, from, to time.Time, step time.Duration) ([]series.Scrape, error)
}

// openHistory connects to the API at url with the settings of cfg.
type openHistory func(url string, cfg config.Config) (historyReader, error)

// backtestCmd runs `watchdog backtest`; history opens --prometheus.
func backtestCmd(ctx context.Context, args []string, stdout, stderr io.Writer, history openHistory) error {
	fs := flag.NewFlagSet("backtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), backtestUsage)
		fs.PrintDefaults()
	}
	recPath := fs.String("recording", "", "the recording to replay (watchdog record --out)")
	promURL := fs.String("prometheus", "", "a Prometheus-compatible API to read the history from (instead of --recording)")
	fromText := fs.String("from", "", "with --prometheus: the start of the range (RFC 3339)")
	toText := fs.String("to", "", "with --prometheus: the end of the range (RFC 3339)")
	cfgPath := fs.String("config", "", "YAML decoded over the recording's settings or the defaults (the watchdog's config file layout)")
	output := fs.String("output", "text", "report format: text, json or markdown")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: backtest: %v", errUsage, err)
	}
	var from, to time.Time
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: backtest: unexpected arguments %q", errUsage, fs.Args())
	case (*recPath == "") == (*promURL == ""):
		return fmt.Errorf("%w: backtest: give one of --recording FILE and --prometheus URL", errUsage)
	case *output != "text" && *output != "json" && *output != "markdown":
		return fmt.Errorf("%w: backtest: --output %q is not one of text, json, markdown", errUsage, *output)
	case *recPath != "" && (*fromText != "" || *toText != ""):
		return fmt.Errorf("%w: backtest: --from and --to go with --prometheus; a recording is replayed whole", errUsage)
	case *promURL != "":
		var errs []error
		for _, t := range []struct {
			flag, text string
			dst        *time.Time
		}{{"--from", *fromText, &from}, {"--to", *toText, &to}} {
			var err error
			if *t.dst, err = time.Parse(time.RFC3339, t.text); err != nil {
				errs = append(errs, fmt.Errorf("%s %q is not an RFC 3339 time (2026-01-02T15:04:05Z)", t.flag, t.text))
			}
		}
		if len(errs) == 0 && !from.Before(to) {
			errs = append(errs, fmt.Errorf("--from %s is not before --to %s", *fromText, *toText))
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%w: backtest: %w", errUsage, err)
		}
	}

	var src backtest.Source
	recorded := ""
	if *recPath != "" {
		f, err := os.Open(*recPath)
		if err != nil {
			return fmt.Errorf("backtest: %w", err)
		}
		defer f.Close()
		rd, err := recording.NewReader(f)
		if err != nil {
			return fmt.Errorf("backtest: %s: %w", *recPath, err)
		}
		src, recorded = backtest.Recording(rd), rd.Header().Settings
	}
	cfg, err := replaySettings(recorded, *cfgPath)
	if err != nil {
		return fmt.Errorf("backtest: %w", err)
	}
	source := *recPath
	if *promURL != "" {
		source = *promURL
		reader, err := history(*promURL, cfg)
		if err != nil {
			return fmt.Errorf("backtest: --prometheus: %w", err)
		}
		// The rounds start at from; the detectors' look-back before it is
		// read too, so baselines judge the first round as the daemon would.
		scrapes, err := reader.Range(ctx, from.Add(-cfg.Detectors.MaxLookback()), to, cfg.Scrape.Interval)
		if err != nil {
			return fmt.Errorf("backtest: %s: %w", *promURL, err)
		}
		src = backtest.Scrapes(scrapes, from, to, cfg.Evaluation.Interval)
	}
	res, err := backtest.Run(src, backtest.Settings{
		ScrapeInterval: cfg.Scrape.Interval,
		MaxSeries:      cfg.Scrape.MaxSeries,
		Detectors:      cfg.Detectors,
		Alerts:         cfg.Alerts,
		Correlation:    cfg.Correlation,
		SLOs:           cfg.SLOs,
		Links:          alert.Links{ExternalURL: cfg.ExternalURL, Runbooks: cfg.Runbooks},
	})
	if err != nil {
		return fmt.Errorf("backtest: %s: %w", source, err)
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

// prometheusHistory opens --prometheus with the history: settings of the
// configuration (replica label, selector, HTTP client), its URL replaced.
// A one-shot command's query counters are not exported anywhere.
func prometheusHistory(url string, cfg config.Config) (historyReader, error) {
	hc := cfg.History
	hc.URL = url
	return promsource.New(hc, cfg.Scrape.Interval, promsource.Options{MaxSeries: cfg.Scrape.MaxSeries}, prometheus.NewRegistry(), zap.NewNop())
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
	errs = append(errs, cfg.Detectors.Validate(), cfg.Correlation.Validate(), cfg.Alerts.Validate("alerts"), cfg.SLOs.Validate("slos"))
	if err := (notify.RouteConfig{Routes: cfg.Notify.Routes}).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("notify.%w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return config.Config{}, fmt.Errorf("settings:\n%w", err)
	}
	return cfg, nil
}
