package config

import (
	"errors"
	"fmt"
)

// Where samples come from (Config.Source).
const (
	// SourceScrape: the watchdog scrapes every target's /metrics.
	SourceScrape = "scrape"
	// SourcePrometheus: the watchdog reads the fleet's latest samples from
	// the Prometheus-compatible API of history.url instead of scraping;
	// replicas are found in the answer, no target list is needed.
	SourcePrometheus = "prometheus"
)

// FromPrometheus reports whether samples are read from history.url
// instead of scraped.
func (c Config) FromPrometheus() bool { return c.Source == SourcePrometheus }

// validateSource checks source and history.
func (c Config) validateSource() error {
	var errs []error
	switch c.Source {
	case SourceScrape:
	case SourcePrometheus:
		if !c.History.Enabled() {
			errs = append(errs, errors.New("source: prometheus reads from history.url, which is not set"))
		}
		if c.HA.Enabled || c.Discovery.Enabled() {
			errs = append(errs, errors.New("source: prometheus finds replicas in Prometheus; it does not combine with discovery or ha"))
		}
	default:
		errs = append(errs, fmt.Errorf("source: %q is not %s or %s", c.Source, SourceScrape, SourcePrometheus))
	}
	if err := c.History.Validate("history"); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
