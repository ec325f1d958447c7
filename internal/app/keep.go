package app

import (
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
)

// keptFamilies are the families the scraper keeps: what the assessment of
// cfg reads, or every family (nil) with scrape.keep_all_families.
func keptFamilies(cfg config.Config) []string {
	if cfg.Scrape.KeepAllFamilies {
		return nil
	}
	return assess.Reads(cfg.Detectors)
}
