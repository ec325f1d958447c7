package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/diagnose"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

const diagnoseUsage = `usage: watchdog diagnose [flags] URL...

One-shot triage: scrape each SGLang server a few times an interval apart, then print
its global state (running, queued, KV usage, hit rate, throughput, latency), the layer
the trouble sits in, and any incident found with its evidence and next steps.

URL is a server's base URL (http://host:30000, /metrics is appended), a full metrics
URL, or host:port; prefix name= to name it (name=http://host:30000).

Exit status: 0 no incident (the report ends UNDER PRESSURE where a replica's triage
shows requests waiting or latency high), 3 incident found (a warning/critical finding,
a target down, a failed /health_generate), 2 usage error, 1 other errors.
With WATCHDOG_CONFIG set, the daemon's detector settings and runbook links are used.

flags:
`

// diagnoseCmd runs `watchdog diagnose`. An incident comes back as an error
// wrapping diagnose.ErrIncident after the report is printed.
func diagnoseCmd(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("diagnose", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), diagnoseUsage)
		fs.PrintDefaults()
	}
	interval := fs.Duration("interval", diagnose.DefaultInterval, "time between the scrapes of a target")
	samples := fs.Int("samples", diagnose.DefaultSamples, "scrapes per target (at least 2 for rates and latencies)")
	output := fs.String("output", "text", "report format: text or json")
	timeout := fs.Duration("timeout", 0, "timeout of one scrape (default 80% of --interval, at most 10s)")
	probe := fs.Bool("health-probe", true, "also GET /health_generate once (one generated token: the hang probe)")
	probeTimeout := fs.Duration("health-timeout", scrape.DefaultHealthProbeTimeout, "timeout of the /health_generate probe")

	// Flags may come before or after the URLs.
	var urls []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return fmt.Errorf("%w: diagnose: %v", errUsage, err)
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		urls, rest = append(urls, rest[0]), rest[1:]
	}
	usageErr := func(format string, a ...any) error {
		fs.Usage()
		return fmt.Errorf("%w: diagnose: %s", errUsage, fmt.Sprintf(format, a...))
	}
	if *output != "text" && *output != "json" {
		return usageErr("--output %q: want text or json", *output)
	}
	if *interval <= 0 || *samples < 1 || *timeout < 0 || *probeTimeout <= 0 {
		return usageErr("--interval and --health-timeout must be positive, --samples at least 1")
	}
	targets, err := diagnose.ParseTargets(urls)
	if err != nil {
		return usageErr("%v", err)
	}

	opts := diagnose.Options{
		Interval: *interval, Samples: *samples, Timeout: *timeout,
		HealthProbe: *probe, HealthTimeout: *probeTimeout,
	}
	if err := opts.Validate(); err != nil {
		return usageErr("%v", err)
	}
	if err := daemonSettings(env, &opts); err != nil {
		return err
	}
	if *output == "text" {
		span := time.Duration(*samples-1) * *interval
		fmt.Fprintf(stderr, "diagnosing %d target(s): %d scrape(s) over %s...\n", len(targets), *samples, span)
	}
	rep, err := diagnose.Run(ctx, targets, opts)
	if err != nil {
		return fmt.Errorf("diagnose: %w", err)
	}
	if *output == "json" {
		err = diagnose.WriteJSON(stdout, rep)
	} else {
		err = diagnose.WriteText(stdout, rep)
	}
	if err != nil {
		return fmt.Errorf("diagnose: write report: %w", err)
	}
	return rep.Err()
}

// daemonSettings applies the daemon's detector settings and runbook links
// from WATCHDOG_CONFIG and WATCHDOG_EXTERNAL_URL, so a diagnosis judges as
// the daemon would. Only those sections are read: no targets are needed.
func daemonSettings(env map[string]string, opts *diagnose.Options) error {
	cfg := config.Default()
	if path := env["WATCHDOG_CONFIG"]; path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("WATCHDOG_CONFIG: %w", err)
		}
		if cfg, err = config.Parse(cfg, data); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if err := cfg.Detectors.Validate(); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		opts.Detectors = &cfg.Detectors
	}
	if v, ok := env["WATCHDOG_EXTERNAL_URL"]; ok {
		cfg.ExternalURL = v
	}
	opts.RunbookBase, opts.Runbooks = cfg.ExternalURL, cfg.Runbooks
	return nil
}
