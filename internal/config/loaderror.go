package config

import (
	"bytes"
	"net"
	"os"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Reason names the step at which a configuration failed to load. It is
// short and never quotes the configuration, so it can label a metric where
// the error's own text, which may quote a URL, cannot.
type Reason string

// The steps of LoadWithFlags, in the order they run.
const (
	// ReasonEnv: an environment variable does not parse (a duration, a
	// WATCHDOG_TARGETS item) or contradicts another (a secret and its
	// *_FILE both set).
	ReasonEnv Reason = "env"
	// ReasonRead: the file, a *_file secret or api.token_file cannot be read.
	ReasonRead Reason = "read"
	// ReasonParse: the file is not YAML, has an unknown key or a value of
	// the wrong type.
	ReasonParse Reason = "parse"
	// ReasonValidate: a setting is out of range or inconsistent with
	// another, whichever layer (file, environment, flag) set it.
	ReasonValidate Reason = "validate"
)

// LoadError is an error of LoadWithFlags with the step that failed. When
// several steps fail the returned error joins one LoadError per step, and
// errors.As finds the earliest.
type LoadError struct {
	Step Reason
	Err  error
}

func (e *LoadError) Error() string { return e.Err.Error() }
func (e *LoadError) Unwrap() error { return e.Err }

// Reason is the step, as a metric label (internal/reload reads it).
func (e *LoadError) Reason() string { return string(e.Step) }

func failed(step Reason, err error) error {
	if err == nil {
		return nil
	}
	return &LoadError{Step: step, Err: err}
}

// Fallback returns base with the listen address, the log settings and the
// web paths (external_url, route_prefix) the
// daemon would use, for a daemon whose configuration does not load and
// that must still serve its probes and say why. Each comes from its flag,
// else its environment variable, else the file, as LoadWithFlags takes
// them; the file is read for these keys alone, ignoring every other, so a
// file that fails validation or has an unknown key still gives its
// listen_address. A value that is itself invalid, or a file that cannot be
// read or is not YAML, leaves base's.
func Fallback(base Config, environ map[string]string, flags Flags) Config {
	var file struct {
		ListenAddress *string `yaml:"listen_address"`
		LogLevel      *string `yaml:"log_level"`
		LogFormat     *string `yaml:"log_format"`
		ExternalURL   *string `yaml:"external_url"`
		RoutePrefix   *string `yaml:"route_prefix"`
	}
	if path := flags.File(environ); path != "" {
		if data, err := os.ReadFile(path); err == nil {
			// Not strict: an unknown key elsewhere must not hide these.
			if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&file); err != nil {
				file.ListenAddress, file.LogLevel, file.LogFormat, file.ExternalURL, file.RoutePrefix = nil, nil, nil, nil, nil
			}
		}
	}
	pick := func(flag *string, env string, fromFile *string, valid func(string) bool, dst *string) {
		v, set := environ[env]
		switch {
		case flag != nil:
			v, set = *flag, true
		case set:
		case fromFile != nil:
			v, set = *fromFile, true
		}
		if set && valid(v) {
			*dst = v
		}
	}
	out := base
	pick(flags.ListenAddress, "WATCHDOG_LISTEN_ADDRESS", file.ListenAddress, func(v string) bool {
		_, _, err := net.SplitHostPort(v)
		return err == nil
	}, &out.ListenAddress)
	pick(flags.LogLevel, "WATCHDOG_LOG_LEVEL", file.LogLevel, func(v string) bool { return slices.Contains(logLevels, v) }, &out.LogLevel)
	pick(flags.LogFormat, "WATCHDOG_LOG_FORMAT", file.LogFormat, func(v string) bool { return slices.Contains(LogFormats, v) }, &out.LogFormat)
	// The waiting server answers under the same prefix as the daemon, so
	// probes configured for it reach it.
	pick(flags.ExternalURL, "WATCHDOG_EXTERNAL_URL", file.ExternalURL, validExternalURL, &out.ExternalURL)
	pick(flags.RoutePrefix, "WATCHDOG_ROUTE_PREFIX", file.RoutePrefix, validPrefix, &out.RoutePrefix)
	return out
}
