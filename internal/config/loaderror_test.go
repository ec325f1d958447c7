package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every way a configuration fails to load names its step, the earliest
// when several fail, and the text still says what is wrong.
func TestLoadErrorsNameTheStepThatFailed(t *testing.T) {
	dir := t.TempDir()
	unreadable := filepath.Join(dir, "token")
	if err := os.Mkdir(unreadable, 0o700); err != nil { // reading a directory fails
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		step Reason
		text string
	}{
		{"a duration that does not parse", map[string]string{"WATCHDOG_TARGETS": "http://a:1", "WATCHDOG_SCRAPE_INTERVAL": "often"}, ReasonEnv, "WATCHDOG_SCRAPE_INTERVAL"},
		{"a bad WATCHDOG_TARGETS item", map[string]string{"WATCHDOG_TARGETS": "a=http://a:1,::nonsense"}, ReasonEnv, "WATCHDOG_TARGETS"},
		{"a secret and its file", map[string]string{"WATCHDOG_TARGETS": "http://a:1", "SLACK_BOT_TOKEN": "x", "SLACK_BOT_TOKEN_FILE": "/f"}, ReasonEnv, "SLACK_BOT_TOKEN_FILE"},
		{"a missing file", map[string]string{"WATCHDOG_CONFIG": filepath.Join(dir, "missing.yaml")}, ReasonRead, "WATCHDOG_CONFIG"},
		{"an unreadable secret file", map[string]string{"WATCHDOG_TARGETS": "http://a:1", "PAGERDUTY_ROUTING_KEY_FILE": unreadable}, ReasonRead, "notify.pagerduty.routing_key_file"},
		{"not YAML", map[string]string{"WATCHDOG_CONFIG": "testdata/bad-syntax.yaml"}, ReasonParse, "yaml"},
		{"an unknown key", map[string]string{"WATCHDOG_CONFIG": "testdata/bad-unknown-key.yaml"}, ReasonParse, "intervall"},
		{"a value out of range", map[string]string{"WATCHDOG_CONFIG": "testdata/bad-thresholds.yaml"}, ReasonValidate, "alerts.for"},
		{"no targets", map[string]string{}, ReasonValidate, "WATCHDOG_TARGETS"},
		{"env and validation both wrong: the earlier step", map[string]string{"WATCHDOG_TARGETS": "::nonsense", "WATCHDOG_LOG_LEVEL": "loud"}, ReasonEnv, "log_level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(Default(), tc.env)
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("%v: not a *LoadError", err)
			}
			if le.Step != tc.step || le.Reason() != string(tc.step) {
				t.Errorf("step %q, want %q (%v)", le.Step, tc.step, err)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error does not say %q: %v", tc.text, err)
			}
		})
	}
}

// Fallback finds the listen address and log settings however broken the
// rest of the configuration is, and keeps the defaults where it cannot.
func TestFallbackReadsWhatItCan(t *testing.T) {
	dir := t.TempDir()
	file := func(body string) string {
		path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	str := func(s string) *string { return &s }
	def := Default()
	for _, tc := range []struct {
		name                  string
		body                  string // the file, if any
		env                   map[string]string
		flags                 Flags
		listen, level, format string
	}{
		{"nothing given", "", map[string]string{}, Flags{}, def.ListenAddress, def.LogLevel, def.LogFormat},
		{"a file with an unknown key and an invalid value",
			"listen_address: 127.0.0.1:9500\nlog_format: logfmt\nscrape: {intervall: 1s}\nalerts: {for: -1s}\n", map[string]string{}, Flags{},
			"127.0.0.1:9500", def.LogLevel, "logfmt"},
		{"a file that is not YAML", "listen_address: 127.0.0.1:9500\ntargets: [\n", map[string]string{}, Flags{},
			def.ListenAddress, def.LogLevel, def.LogFormat},
		{"the environment over the file", "listen_address: 127.0.0.1:9500\nlog_level: debug\n",
			map[string]string{"WATCHDOG_LISTEN_ADDRESS": "127.0.0.1:9501", "WATCHDOG_LOG_LEVEL": "warn"}, Flags{},
			"127.0.0.1:9501", "warn", def.LogFormat},
		{"flags over the environment", "", map[string]string{"WATCHDOG_LISTEN_ADDRESS": "127.0.0.1:9501"},
			Flags{ListenAddress: str("127.0.0.1:9502"), LogFormat: str("console")}, "127.0.0.1:9502", def.LogLevel, "console"},
		{"invalid values keep the defaults", "listen_address: nowhere\n",
			map[string]string{"WATCHDOG_LOG_LEVEL": "loud", "WATCHDOG_LOG_FORMAT": "xml"}, Flags{},
			def.ListenAddress, def.LogLevel, def.LogFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tc.env {
				env[k] = v
			}
			if tc.body != "" {
				env["WATCHDOG_CONFIG"] = file(tc.body)
			}
			got := Fallback(def, env, tc.flags)
			if got.ListenAddress != tc.listen || got.LogLevel != tc.level || got.LogFormat != tc.format {
				t.Errorf("got %s %s %s, want %s %s %s", got.ListenAddress, got.LogLevel, got.LogFormat, tc.listen, tc.level, tc.format)
			}
		})
	}
	if got := Fallback(def, map[string]string{"WATCHDOG_CONFIG": filepath.Join(dir, "missing.yaml")}, Flags{}); got.ListenAddress != def.ListenAddress {
		t.Errorf("a missing file: listen %s", got.ListenAddress)
	}
}

// TestFallbackKeepsTheWebPaths: the server waiting for a usable
// configuration answers under the prefix the daemon would, so probes and
// the Ingress reach it.
func TestFallbackKeepsTheWebPaths(t *testing.T) {
	path := filepath.Join(t.TempDir(), "watchdog.yaml")
	if err := os.WriteFile(path, []byte("external_url: https://ops.example.com/watchdog/\nscrape: {intervall: 1s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	got := Fallback(Default(), map[string]string{"WATCHDOG_CONFIG": path}, Flags{})
	if p := got.Prefixes(); p.Routes != "/watchdog" {
		t.Errorf("from the file: routes %q, want /watchdog", p.Routes)
	}
	got = Fallback(Default(), map[string]string{"WATCHDOG_CONFIG": path, "WATCHDOG_ROUTE_PREFIX": "/env"}, Flags{RoutePrefix: str("/flag")})
	if p := got.Prefixes(); p != (Prefixes{Routes: "/flag", Links: "/watchdog"}) {
		t.Errorf("flag over environment over file: %+v", p)
	}
	got = Fallback(Default(), map[string]string{"WATCHDOG_EXTERNAL_URL": "not a url", "WATCHDOG_ROUTE_PREFIX": "/a?b"}, Flags{})
	if got.ExternalURL != "" || got.RoutePrefix != "" {
		t.Errorf("invalid values kept: %q %q", got.ExternalURL, got.RoutePrefix)
	}
}
