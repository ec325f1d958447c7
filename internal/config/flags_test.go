package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagsOverEnvironmentOverFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "watchdog.yaml")
	if err := os.WriteFile(path, []byte("listen_address: ':1'\nlog_level: debug\nlog_format: console\ntargets: [{name: a, url: 'http://a:1'}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	for _, tc := range []struct {
		name                  string
		env                   map[string]string
		flags                 Flags
		listen, level, format string
	}{
		{"file", map[string]string{"WATCHDOG_CONFIG": path}, Flags{}, ":1", "debug", "console"},
		{"environment over file", map[string]string{"WATCHDOG_CONFIG": path, "WATCHDOG_LISTEN_ADDRESS": ":2", "WATCHDOG_LOG_LEVEL": "warn", "WATCHDOG_LOG_FORMAT": "logfmt"},
			Flags{}, ":2", "warn", "logfmt"},
		{"flags over environment", map[string]string{"WATCHDOG_CONFIG": "/nonexistent", "WATCHDOG_LISTEN_ADDRESS": ":2", "WATCHDOG_LOG_LEVEL": "warn", "WATCHDOG_LOG_FORMAT": "logfmt"},
			Flags{ConfigFile: str(path), ListenAddress: str(":3"), LogLevel: str("error"), LogFormat: str("json")}, ":3", "error", "json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadWithFlags(Default(), tc.env, tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ListenAddress != tc.listen || cfg.LogLevel != tc.level || cfg.LogFormat != tc.format {
				t.Errorf("got %s %s %s, want %s %s %s", cfg.ListenAddress, cfg.LogLevel, cfg.LogFormat, tc.listen, tc.level, tc.format)
			}
			if got := tc.flags.File(tc.env); got != path {
				t.Errorf("File() = %q, want %q", got, path)
			}
		})
	}
	// A missing file is reported under the name it was given by.
	_, err := LoadWithFlags(Default(), map[string]string{}, Flags{ConfigFile: str("/nonexistent/w.yaml")})
	if err == nil || !strings.HasPrefix(err.Error(), "--config.file:") {
		t.Errorf("missing --config.file: %v", err)
	}
	_, err = Load(Default(), map[string]string{"WATCHDOG_CONFIG": "/nonexistent/w.yaml"})
	if err == nil || !strings.HasPrefix(err.Error(), "WATCHDOG_CONFIG:") {
		t.Errorf("missing WATCHDOG_CONFIG: %v", err)
	}
	// The web paths: flag over environment over file.
	if err := os.WriteFile(path, []byte("external_url: https://file.example.com/f/\nroute_prefix: /file\ntargets: [{name: a, url: 'http://a:1'}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name             string
		env              map[string]string
		flags            Flags
		external, prefix string
	}{
		{"file", map[string]string{"WATCHDOG_CONFIG": path}, Flags{}, "https://file.example.com/f/", "/file"},
		{"environment over file", map[string]string{"WATCHDOG_CONFIG": path, "WATCHDOG_EXTERNAL_URL": "https://env.example.com/e/", "WATCHDOG_ROUTE_PREFIX": "/env"},
			Flags{}, "https://env.example.com/e/", "/env"},
		{"flags over environment", map[string]string{"WATCHDOG_CONFIG": path, "WATCHDOG_EXTERNAL_URL": "https://env.example.com/e/", "WATCHDOG_ROUTE_PREFIX": "/env"},
			Flags{ExternalURL: str("https://flag.example.com/watchdog/"), RoutePrefix: str("")}, "https://flag.example.com/watchdog/", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadWithFlags(Default(), tc.env, tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ExternalURL != tc.external || cfg.RoutePrefix != tc.prefix {
				t.Errorf("external_url %q route_prefix %q, want %q %q", cfg.ExternalURL, cfg.RoutePrefix, tc.external, tc.prefix)
			}
		})
	}
	// An empty --web.route-prefix given over the environment's falls back
	// to the external URL's path, as in Prometheus.
	cfg, err := LoadWithFlags(Default(), map[string]string{"WATCHDOG_CONFIG": path, "WATCHDOG_ROUTE_PREFIX": "/env"},
		Flags{ExternalURL: str("https://flag.example.com/watchdog/"), RoutePrefix: str("")})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Prefixes(); got != (Prefixes{Routes: "/watchdog", Links: "/watchdog"}) {
		t.Errorf("prefixes %+v", got)
	}
	_, err = LoadWithFlags(Default(), map[string]string{"WATCHDOG_TARGETS": "http://a:1"}, Flags{ExternalURL: str("ops.example.com/watchdog")})
	if err == nil || !strings.Contains(err.Error(), `external_url: "ops.example.com/watchdog" is not an absolute http(s) URL`) {
		t.Errorf("--web.external-url without a scheme: %v", err)
	}

	// A flag's value is validated like any other.
	_, err = LoadWithFlags(Default(), map[string]string{"WATCHDOG_TARGETS": "http://a:1"}, Flags{LogFormat: str("xml")})
	if err == nil || !strings.Contains(err.Error(), `log_format: "xml" is not one of json, logfmt, console`) {
		t.Errorf("--log.format=xml: %v", err)
	}
}
