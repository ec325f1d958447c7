package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	promversion "github.com/prometheus/common/version"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/server"
)

// command is one subcommand. Each parses its own flags (so -h works on
// every one) and gets the process streams and test hooks in dio.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, env map[string]string, dio daemonIO) error
}

// commands is the dispatch table: adding a subcommand is one line here.
func commands() []command {
	return []command{
		{"run", "watch the targets (the default command; see watchdog run -h)", runCmd},
		{"demo", "watch a built-in simulated SGLang fleet going through incidents", demoCmd},
		{"diagnose", "one-shot triage of URL...: scrape, print state, layer and incidents (exit 3: incident)", func(ctx context.Context, args []string, env map[string]string, dio daemonIO) error {
			return diagnoseCmd(ctx, args, env, dio.stdout, dio.stderr)
		}},
		{"record", "run without paging anyone and write the scrapes and rounds to a file (see watchdog record -h)", recordCmd},
		{"backtest", "replay a recording or a Prometheus range and print what would have paged and resolved", func(ctx context.Context, args []string, _ map[string]string, dio daemonIO) error {
			return backtestCmd(ctx, args, dio.stdout, dio.stderr, prometheusHistory)
		}},
		{"check", "check config FILE... / check ready URL: validate configuration files as the daemon loads them; ask a running watchdog whether it is ready", checkCmd},
		{"silence", "add, list or expire silences of a running daemon (see watchdog silence -h)", silenceCmd},
		{"version", "print the version and build information", versionCmd},
	}
}

// errUsage marks command-line mistakes (exit status 2).
var errUsage = errors.New("usage")

// run is the whole program minus signal handling.
func run(ctx context.Context, args []string, env map[string]string, stdout, stderr io.Writer) error {
	return runCommand(ctx, args, env, daemonIO{stdout: stdout, stderr: stderr})
}

// runCommand dispatches args to a subcommand; without one (or with flags
// first, as `watchdog --config.file=...`) it is run.
func runCommand(ctx context.Context, args []string, env map[string]string, dio daemonIO) error {
	name := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if name == "help" {
		writeUsage(dio.stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == name {
			if err := c.run(ctx, args, env, dio); !errors.Is(err, errHelp) {
				return err
			}
			return nil
		}
	}
	writeUsage(dio.stderr)
	return fmt.Errorf("%w: unknown command %q", errUsage, name)
}

func writeUsage(w io.Writer) {
	fmt.Fprint(w, "usage: watchdog [command] [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, "  help      print this help\n\n`watchdog COMMAND -h` lists a command's flags. Flags win over environment variables,\nwhich win over the configuration file (see docs/configuration.md).\n")
}

func versionCmd(_ context.Context, args []string, _ map[string]string, dio daemonIO) error {
	fs := newFlagSet("version", "usage: watchdog version\n\nPrint the version, revision, branch, build date and Go version.\n", dio)
	if err := parseFlags(fs, args, dio, false); err != nil {
		return err
	}
	return printVersion(dio.stdout)
}

func printVersion(w io.Writer) error {
	_, err := fmt.Fprintln(w, promversion.Print("watchdog"))
	return err
}

// newFlagSet returns a subcommand's flag set; -h prints usage and its
// flags to stdout.
func newFlagSet(name, usage string, dio daemonIO) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(dio.stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; errHelp comes back when -h was asked for (its
// usage already printed to stdout), a usage error on a bad flag or on
// arguments where none are taken.
func parseFlags(fs *flag.FlagSet, args []string, dio daemonIO, positional bool) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(dio.stdout)
		fs.Usage()
		return errHelp
	}
	fs.SetOutput(dio.stderr)
	if err != nil {
		fs.Usage()
		return fmt.Errorf("%w: %s: %v", errUsage, fs.Name(), err)
	}
	if !positional && fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("%w: %s: unexpected arguments %q", errUsage, fs.Name(), fs.Args())
	}
	return nil
}

// errHelp ends a command that printed its help (exit status 0).
var errHelp = errors.New("help printed")

// daemonFlags are the flags of run and demo.
type daemonFlags struct {
	configFile, listenAddress, logLevel, logFormat string
	externalURL, routePrefix, webConfigFile        string
	enableLifecycle, enablePprof                   bool
	watchInterval                                  time.Duration
	fs                                             *flag.FlagSet
}

// defaultConfigWatchInterval is how often the configuration file's
// content is compared with what was loaded.
const defaultConfigWatchInterval = 10 * time.Second

// addDaemonFlags defines the flags; base holds the defaults they show
// (the daemon's, or the demo's).
func addDaemonFlags(fs *flag.FlagSet, base config.Config) *daemonFlags {
	f := &daemonFlags{fs: fs}
	fs.StringVar(&f.configFile, "config.file", "", "configuration file (env WATCHDOG_CONFIG)")
	fs.StringVar(&f.listenAddress, "web.listen-address", base.ListenAddress, "address of the HTTP server (env WATCHDOG_LISTEN_ADDRESS, YAML listen_address)")
	fs.StringVar(&f.logLevel, "log.level", base.LogLevel, "debug, info, warn or error (env WATCHDOG_LOG_LEVEL, YAML log_level)")
	fs.StringVar(&f.logFormat, "log.format", base.LogFormat, "json, logfmt or console (env WATCHDOG_LOG_FORMAT, YAML log_format)")
	fs.StringVar(&f.externalURL, "web.external-url", base.ExternalURL, "the URL under which the watchdog is reached from outside, e.g. behind an Ingress; links in pages and the UI start with it, and its path is the default route prefix (env WATCHDOG_EXTERNAL_URL, YAML external_url)")
	fs.StringVar(&f.routePrefix, "web.route-prefix", base.RoutePrefix, "prefix of every HTTP endpoint, probes and /metrics included; defaults to the path of --web.external-url (env WATCHDOG_ROUTE_PREFIX, YAML route_prefix)")
	fs.StringVar(&f.webConfigFile, "web.config.file", "", "web configuration file in Prometheus exporter-toolkit's format: TLS, client certificates and basic auth of every endpoint, probes included; read again on every request")
	fs.BoolVar(&f.enableLifecycle, "web.enable-lifecycle", false, "enable POST /-/reload (same-origin requests only)")
	fs.BoolVar(&f.enablePprof, "web.enable-pprof", false, "serve Go's runtime profiles under /debug/pprof/ (CPU, heap, goroutines, traces)")
	fs.DurationVar(&f.watchInterval, "config.watch-interval", defaultConfigWatchInterval, "how often the configuration file is checked for changes, which reload it; 0 turns watching off (env WATCHDOG_CONFIG_WATCH_INTERVAL)")
	return f
}

// settings returns the flags given on the command line, which the
// configuration loader puts over the environment and the file, and fills
// dio's command-line settings.
func (f *daemonFlags) settings(env map[string]string, dio *daemonIO) (config.Flags, error) {
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	pick := func(name string, v *string) *string {
		if given[name] {
			return v
		}
		return nil
	}
	out := config.Flags{
		ConfigFile: pick("config.file", &f.configFile), ListenAddress: pick("web.listen-address", &f.listenAddress),
		LogLevel: pick("log.level", &f.logLevel), LogFormat: pick("log.format", &f.logFormat),
		ExternalURL: pick("web.external-url", &f.externalURL), RoutePrefix: pick("web.route-prefix", &f.routePrefix),
	}
	// Checked before anything starts: a mistake in it would otherwise
	// surface only when the server binds.
	if err := (server.Web{ConfigFile: f.webConfigFile}).Check(); err != nil {
		return out, err
	}
	dio.webConfigFile = f.webConfigFile
	dio.lifecycle = f.enableLifecycle
	dio.pprof = f.enablePprof
	dio.watchInterval = f.watchInterval
	if v, ok := env["WATCHDOG_CONFIG_WATCH_INTERVAL"]; ok && !given["config.watch-interval"] {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return out, fmt.Errorf("WATCHDOG_CONFIG_WATCH_INTERVAL: %q is not a duration of 0 or more", v)
		}
		dio.watchInterval = d
	}
	if dio.watchInterval < 0 {
		return out, fmt.Errorf("%w: --config.watch-interval must not be negative", errUsage)
	}
	dio.configFile = out.File(env)
	return out, nil
}

const runUsage = `usage: watchdog [run] [flags]

Watch the targets (WATCHDOG_TARGETS, the configuration file's targets or discovery)
and page with a diagnosis. The configuration file is re-read when its content changes
(every --config.watch-interval) and on SIGHUP. A configuration that cannot be used at
start does not stop the daemon: it serves /-/healthy (200), /-/ready (503, saying why)
and /metrics, evaluates nothing, reads the configuration again every
--config.watch-interval (30s when 0) and on SIGHUP, and starts once it loads.
Check a file without starting anything: watchdog check config FILE.

flags:
`

func runCmd(ctx context.Context, args []string, env map[string]string, dio daemonIO) error {
	fs := newFlagSet("run", runUsage, dio)
	fs.Usage = func() {
		writeUsage(fs.Output())
		fmt.Fprint(fs.Output(), "\n"+runUsage)
		fs.PrintDefaults()
	}
	df := addDaemonFlags(fs, config.Default())
	showVersion := fs.Bool("version", false, "print the version and build information, then exit")
	if err := parseFlags(fs, args, dio, false); err != nil {
		return err
	}
	if *showVersion {
		return printVersion(dio.stdout)
	}
	flags, err := df.settings(env, &dio)
	if err != nil {
		return err
	}
	dio.load = func() (config.Config, error) { return config.LoadWithFlags(config.Default(), env, flags) }
	// A configuration that does not load is waited out, not fatal: the
	// daemon may be a container in a serving pod, which a crash loop would
	// take out of its Service.
	return daemonWhenLoaded(ctx, config.Fallback(config.Default(), env, flags), dio)
}

const demoUsage = `usage: watchdog demo [flags]

Run the real daemon against a built-in simulated SGLang fleet on loopback that goes
through a preempt storm, a cache collapse, a retry avalanche, a crash and a GPU
cooling fault in about 7 minutes. Logs and notifications are printed for a terminal (--log.format console).

flags:
`

func demoCmd(ctx context.Context, args []string, env map[string]string, dio daemonIO) error {
	fs := newFlagSet("demo", demoUsage, dio)
	base, err := demoConfig()
	if err != nil {
		return err
	}
	df := addDaemonFlags(fs, base)
	if err := parseFlags(fs, args, dio, false); err != nil {
		return err
	}
	if dio.flags, err = df.settings(env, &dio); err != nil {
		return err
	}
	return demo(ctx, env, dio)
}
