package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/silence"
)

const silenceUsage = `usage: watchdog silence add|ls|expire [flags] [ID]

Manage the silences of a running daemon through its API (flags before arguments):

  watchdog silence add -m 'replica="sim-0"' -m 'class=~"preempt.*"' --duration 2h --comment 'kernel upgrade'
  watchdog silence ls [--output json]
  watchdog silence expire ID

Matchers use Alertmanager's syntax over the labels replica, model, class (also alertname),
severity, incident and the target's labels. add and expire send the bearer token read from --token-file.

Exit status: 0 done, 1 the daemon refused or could not be reached, 2 usage error.

flags:
`

// silenceFlags are the flags every silence subcommand takes.
type silenceFlags struct {
	url, tokenFile string
}

func (f *silenceFlags) add(fs *flag.FlagSet, env map[string]string) {
	fs.StringVar(&f.url, "url", "http://localhost"+config.DefaultListenAddress, "the daemon's base URL")
	fs.StringVar(&f.tokenFile, "token-file", env["WATCHDOG_API_TOKEN_FILE"], "file holding the API token (env WATCHDOG_API_TOKEN_FILE)")
}

func (f *silenceFlags) client(dio daemonIO, needToken bool) (*silence.Client, error) {
	c := &silence.Client{BaseURL: f.url, HTTP: dio.httpClient("silence", 30*time.Second)}
	if !needToken {
		return c, nil
	}
	if f.tokenFile == "" {
		return nil, fmt.Errorf("%w: --token-file (or WATCHDOG_API_TOKEN_FILE) is required to change silences", errUsage)
	}
	b, err := os.ReadFile(f.tokenFile)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	c.Token = strings.TrimSpace(string(b))
	return c, nil
}

func silenceCmd(ctx context.Context, args []string, env map[string]string, dio daemonIO) error {
	usage := func() { fmt.Fprint(dio.stderr, silenceUsage) }
	if len(args) == 0 {
		usage()
		return fmt.Errorf("%w: silence: want add, ls or expire", errUsage)
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(dio.stdout, silenceUsage)
		return errHelp
	}
	sub, args := args[0], args[1:]
	var sf silenceFlags
	fs := newFlagSet("silence "+sub, silenceUsage, dio)
	sf.add(fs, env)
	switch sub {
	case "add":
		return silenceAdd(ctx, fs, &sf, args, env, dio)
	case "ls":
		output := fs.String("output", "text", "text or json")
		if err := parseFlags(fs, args, dio, false); err != nil {
			return err
		}
		if *output != "text" && *output != "json" {
			return fmt.Errorf("%w: --output %q is not text or json", errUsage, *output)
		}
		c, _ := sf.client(dio, false)
		list, err := c.List(ctx)
		if err != nil {
			return fmt.Errorf("listing silences at %s: %w", sf.url, err)
		}
		if *output == "json" {
			enc := json.NewEncoder(dio.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(list)
		}
		tw := tabwriter.NewWriter(dio.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tSTARTS\tENDS\tCREATED BY\tMATCHERS\tCOMMENT")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.State, s.StartsAt.Format(time.RFC3339), s.EndsAt.Format(time.RFC3339),
				s.CreatedBy, strings.Join(s.Matchers, ","), s.Comment)
		}
		return tw.Flush()
	case "expire":
		if err := parseFlags(fs, args, dio, true); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			fs.Usage()
			return fmt.Errorf("%w: silence expire: want one silence ID", errUsage)
		}
		c, err := sf.client(dio, true)
		if err != nil {
			return err
		}
		st, err := c.Expire(ctx, fs.Arg(0))
		if err != nil {
			return fmt.Errorf("expiring silence %s: %w", fs.Arg(0), err)
		}
		fmt.Fprintf(dio.stdout, "%s expired at %s\n", st.ID, st.EndsAt.Format(time.RFC3339))
		return nil
	default:
		usage()
		return fmt.Errorf("%w: silence: unknown subcommand %q (add, ls, expire)", errUsage, sub)
	}
}

func silenceAdd(ctx context.Context, fs *flag.FlagSet, sf *silenceFlags, args []string, env map[string]string, dio daemonIO) error {
	var matchers []string
	fs.Func("m", "a matcher, e.g. 'replica=\"sim-0\"' (repeatable; all must match)", func(v string) error {
		matchers = append(matchers, v)
		return nil
	})
	duration := fs.Duration("duration", 0, "how long from now (or --end)")
	end := fs.String("end", "", "end time, RFC 3339 (or --duration)")
	start := fs.String("start", "", "start time, RFC 3339 (default now)")
	author := fs.String("author", env["USER"], "who sets the silence (default $USER)")
	comment := fs.String("comment", "", "why (a ticket link)")
	if err := parseFlags(fs, args, dio, false); err != nil {
		return err
	}
	now := time.Now()
	req := silence.Request{Matchers: matchers, CreatedBy: *author, Comment: *comment}
	var errs []error
	if *start != "" {
		t, err := time.Parse(time.RFC3339, *start)
		if err != nil {
			errs = append(errs, fmt.Errorf("--start: %q is not an RFC 3339 time", *start))
		}
		req.StartsAt = t
	}
	switch {
	case (*duration > 0) == (*end != ""):
		errs = append(errs, errors.New("give exactly one of --duration (positive) and --end"))
	case *duration > 0:
		from := now
		if !req.StartsAt.IsZero() {
			from = req.StartsAt
		}
		req.EndsAt = from.Add(*duration)
	default:
		t, err := time.Parse(time.RFC3339, *end)
		if err != nil {
			errs = append(errs, fmt.Errorf("--end: %q is not an RFC 3339 time", *end))
		}
		req.EndsAt = t
	}
	if len(matchers) == 0 {
		errs = append(errs, errors.New("at least one -m matcher is required"))
	}
	if err := errors.Join(errs...); err != nil {
		fs.Usage()
		return fmt.Errorf("%w: silence add: %v", errUsage, err)
	}
	c, err := sf.client(dio, true)
	if err != nil {
		return err
	}
	st, err := c.Add(ctx, req)
	if err != nil {
		return fmt.Errorf("adding silence at %s: %w", sf.url, err)
	}
	fmt.Fprintln(dio.stdout, st.ID)
	return nil
}
