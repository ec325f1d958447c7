package detect

import (
	"fmt"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// This file is a whole detector, written as a new one is: its class, its
// detector, its settings and the registry methods on them. It lives with
// the tests, outside Registry(): registry_test.go adds it to a Catalog with
// one line (QueueBacklogEntry) and follows it through configuration,
// detection, paging and documentation.

// QueueBacklog is the class of a queue that never empties.
const QueueBacklog Class = "queue_backlog"

// QueueBacklogEntry is the detector's registry line.
func QueueBacklogEntry() Entry { return detector[QueueBacklogConfig]() }

// QueueBacklogDetector warns when requests wait in the queue throughout
// the range: at no scrape did the scheduler catch up.
type QueueBacklogDetector struct{ cfg QueueBacklogConfig }

// Class implements Detector.
func (d *QueueBacklogDetector) Class() Class { return QueueBacklog }

// Detect implements Detector.
func (d *QueueBacklogDetector) Detect(w Window, now time.Time) []Finding {
	c := d.cfg
	least, ok := w.Min(Sel(series.NumQueueReqs), now.Add(-c.Range), now)
	if !ok || least < c.MinQueued {
		return nil
	}
	f := finding(QueueBacklog, w, Warning, LayerQueue)
	f.Evidence = []Evidence{Evidence{Name: "fewest queued requests", Value: least, Threshold: fmt.Sprintf(">= %v", c.MinQueued)}.WithLimit(c.MinQueued)}
	f.Summary = fmt.Sprintf("At least %v requests queued throughout the last %s", least, ShortDuration(c.Range))
	f.Diagnosis = "Queue layer: the scheduler never caught up with arrivals over the range."
	f.Emergency = []string{"Add capacity or shed load at the gateway."}
	f.RootCause = []string{"Size the fleet for the peak arrival rate."}
	return []Finding{f}
}

// QueueBacklogConfig tunes the backlog warning.
type QueueBacklogConfig struct {
	// Enabled turns the detector on.
	Enabled bool `yaml:"enabled"`
	// Range is how long the queue must stay at MinQueued or above.
	Range time.Duration `yaml:"range" doc:"the queue never empties over this"`
	// MinQueued is the fewest queued requests at every scrape of Range.
	MinQueued float64 `yaml:"min_queued" doc:"fewest queued requests throughout the range"`
}

// The methods below make QueueBacklogConfig a registry entry (settings, in
// registry.go).
func (c QueueBacklogConfig) class() Class                 { return QueueBacklog }
func (c QueueBacklogConfig) enabled() bool                { return c.Enabled }
func (c QueueBacklogConfig) disabled() QueueBacklogConfig { c.Enabled = false; return c }
func (c QueueBacklogConfig) usesTriage() bool             { return false }
func (c QueueBacklogConfig) lookback() time.Duration      { return c.Range }
func (c QueueBacklogConfig) reads() []string              { return []string{series.NumQueueReqs} }
func (c QueueBacklogConfig) needs() []need {
	return []need{{class: QueueBacklog, what: "the queue gauge", anyOf: [][]string{{series.NumQueueReqs}}}}
}

func (c QueueBacklogConfig) build(buildEnv) Detector { return &QueueBacklogDetector{cfg: c} }

func (c QueueBacklogConfig) oneShot(lookback time.Duration, samples int) (QueueBacklogConfig, OneShot) {
	c.Range = lookback
	return c, OneShot{Judged: true, Note: "judged over the observation"}
}

func (c QueueBacklogConfig) validate(e *configErrors) {
	e.positiveDuration("range", c.Range)
	e.positive("min_queued", c.MinQueued)
}

func (QueueBacklogConfig) defaults() QueueBacklogConfig {
	return QueueBacklogConfig{Enabled: true, Range: 2 * time.Minute, MinQueued: 100}
}

func (c QueueBacklogConfig) severities() []Severity { return []Severity{Warning} }

// position: off the chain, a backlog shows as slow first tokens; a hung
// engine explains it.
func (c QueueBacklogConfig) position(Finding) position {
	return position{explains: []Class{QueueLatency}, explainedBy: []Class{EngineHang}}
}

func (c QueueBacklogConfig) doc() doc {
	return doc{
		means:    "requests that never leave the queue",
		signals:  "`sglang:num_queue_reqs` at or above `min_queued` at every scrape of `range`",
		settings: "A queue that never empties: the fewest queued requests over the range at or above a floor.",
	}
}
