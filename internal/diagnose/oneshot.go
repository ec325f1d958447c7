package diagnose

import (
	"fmt"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Adapting the daemon's detectors to a one-shot observation.
//
// The daemon compares a recent Range (minutes) with a Baseline (an hour)
// before it. A one-shot only has the few scrapes it just took, so each
// detector's registry entry shortens its ranges to the observation's
// lookback (the span between the first and the last scrape, plus half an
// interval so the first scrape falls inside the range), and says what it
// can still judge. There is no data before the first scrape, so every
// baseline measure comes back "not ok": detectors with an absolute rule
// for a young replica fall back to it (preempt_storm pages on its
// absolute retraction floor with a full KV pool); detectors that can only
// judge relative to a baseline stay silent, and the report lists them as
// "needs history". A detector whose shortened settings fail its
// validation is switched off for the one-shot and reported as not run,
// rather than failing the whole command.

// DetectorNote says whether a one-shot can judge a detector's class.
type DetectorNote struct {
	Class  detect.Class `json:"class"`
	Judged bool         `json:"judged"`
	Note   string       `json:"note"`
}

// OneShotConfig returns base adapted to a one-shot of samples scrapes
// covering lookback, and a note for every detector that runs (in the
// order detect.New builds them) followed by the detectors it switched off.
// It fails only when settings outside the running detectors (the triage,
// a detector already off) do not validate.
func OneShotConfig(base detect.Config, lookback time.Duration, samples int) (detect.Config, []DetectorNote, error) {
	cfg := base
	// The triage averages the running batch and the queue over its range.
	cfg.Triage.Range = lookback
	var running, notRun []DetectorNote
	for _, e := range base.Catalog() {
		var how detect.OneShot
		cfg, how = e.OneShot(cfg, lookback, samples)
		if !e.Enabled(cfg) {
			continue
		}
		if problems := e.Check(cfg); len(problems) > 0 {
			cfg = e.Disable(cfg)
			msgs := make([]string, len(problems))
			for i, p := range problems {
				msgs[i] = p.Error()
			}
			notRun = append(notRun, DetectorNote{Class: e.Class(), Judged: false,
				Note: "not run: its settings cannot be shortened to a one-shot (" + strings.Join(msgs, "; ") + ")"})
			continue
		}
		running = append(running, DetectorNote{Class: e.Class(), Judged: how.Judged, Note: how.Note})
	}
	if err := cfg.Validate(); err != nil {
		return base, nil, fmt.Errorf("detector settings for a one-shot of %s: %w", lookback, err)
	}
	return cfg, append(running, notRun...), nil
}
