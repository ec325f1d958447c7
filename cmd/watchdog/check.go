package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
)

const checkUsage = `usage: watchdog check config FILE...

Validate configuration files as the daemon loads them: strict YAML (an unknown key is
an error) over the defaults, then every setting, each problem printed with its path.
Environment overrides and *_file secrets are not applied, and a file without targets is
valid (WATCHDOG_TARGETS may supply them).

Exit status: 0 every file is valid, 1 a file is invalid or unreadable, 2 usage error.
`

// errInvalidConfig is returned when a checked file is invalid (exit 1).
var errInvalidConfig = errors.New("invalid configuration")

func checkCmd(_ context.Context, args []string, _ map[string]string, dio daemonIO) error {
	fs := newFlagSet("check", checkUsage, dio)
	if err := parseFlags(fs, args, dio, true); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] != "config" {
		fs.Usage()
		return fmt.Errorf("%w: check: want `check config FILE...`", errUsage)
	}
	files := rest[1:]
	if len(files) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: check config: no files given", errUsage)
	}
	invalid := 0
	for _, path := range files {
		if err := config.CheckFile(path); err != nil {
			invalid++
			fmt.Fprintf(dio.stderr, "%s: FAILED:\n  %s\n", path, strings.ReplaceAll(err.Error(), "\n", "\n  "))
			continue
		}
		fmt.Fprintf(dio.stdout, "%s: SUCCESS\n", path)
	}
	if invalid > 0 {
		return fmt.Errorf("%w: %d of %d files", errInvalidConfig, invalid, len(files))
	}
	return nil
}
