package config

// Log formats. JSON and logfmt are one structured record per line;
// console is for a person at a terminal (the demo), and is the only format
// in which the log integration also prints each notification as a
// multi-line block.
const (
	LogFormatJSON    = "json"
	LogFormatLogfmt  = "logfmt"
	LogFormatConsole = "console"
)

// LogFormats are the accepted values of log_format.
var LogFormats = []string{LogFormatJSON, LogFormatLogfmt, LogFormatConsole}

// logLevels are the accepted values of log_level.
var logLevels = []string{"debug", "info", "warn", "error"}

// Flags are the settings given on the command line. A nil field was not
// given; a given one wins over its environment variable and the file.
type Flags struct {
	ConfigFile    *string // --config.file, over WATCHDOG_CONFIG
	ListenAddress *string // --web.listen-address, over WATCHDOG_LISTEN_ADDRESS
	LogLevel      *string // --log.level, over WATCHDOG_LOG_LEVEL
	LogFormat     *string // --log.format, over WATCHDOG_LOG_FORMAT
	ExternalURL   *string // --web.external-url, over WATCHDOG_EXTERNAL_URL
	RoutePrefix   *string // --web.route-prefix, over WATCHDOG_ROUTE_PREFIX
}

// File is the configuration file the daemon reads (and watches):
// --config.file, else WATCHDOG_CONFIG; "" for none.
func (f Flags) File(environ map[string]string) string {
	if f.ConfigFile != nil {
		return *f.ConfigFile
	}
	return environ["WATCHDOG_CONFIG"]
}

// configFile picks the file and names where it came from, for errors.
func (f Flags) configFile(fromEnv *string) (path, source string) {
	if f.ConfigFile != nil {
		return *f.ConfigFile, "--config.file"
	}
	if fromEnv != nil {
		return *fromEnv, "WATCHDOG_CONFIG"
	}
	return "", ""
}

func (f Flags) apply(cfg *Config) {
	for _, o := range []struct {
		dst *string
		v   *string
	}{
		{&cfg.ListenAddress, f.ListenAddress},
		{&cfg.LogLevel, f.LogLevel},
		{&cfg.LogFormat, f.LogFormat},
		{&cfg.ExternalURL, f.ExternalURL},
		{&cfg.RoutePrefix, f.RoutePrefix},
	} {
		if o.v != nil {
			*o.dst = *o.v
		}
	}
}
