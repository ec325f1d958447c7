package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/common/model"
)

// Incidents configures the incident journal (internal/incident): how long
// resolved incidents are kept and how much is kept of each.
type Incidents struct {
	// Retention keeps a resolved incident (its page, postmortem draft and
	// API record) this long; "30d", "720h".
	Retention model.Duration `yaml:"retention"`
	// MaxIncidents bounds the incidents kept; beyond it the oldest
	// resolved one goes first.
	MaxIncidents int `yaml:"max_incidents"`
	// MaxPointsPerSignal bounds each evidence series of an incident; a
	// full series is thinned to every other point, keeping its onset,
	// peak, fire and resolve.
	MaxPointsPerSignal int `yaml:"max_points_per_signal"`
}

// DefaultIncidents keeps 30 days, up to 500 incidents of 240 points per
// signal: a few megabytes of state at most.
func DefaultIncidents() Incidents {
	return Incidents{Retention: model.Duration(30 * 24 * time.Hour), MaxIncidents: 500, MaxPointsPerSignal: 240}
}

// Validate reports every problem, each with its YAML path under prefix.
func (c Incidents) Validate(prefix string) error {
	var errs []error
	if c.Retention <= 0 {
		errs = append(errs, fmt.Errorf("%s.retention: must be positive, got %s", prefix, c.Retention))
	}
	if c.MaxIncidents <= 0 {
		errs = append(errs, fmt.Errorf("%s.max_incidents: must be positive, got %d", prefix, c.MaxIncidents))
	}
	if c.MaxPointsPerSignal < 8 {
		errs = append(errs, fmt.Errorf("%s.max_points_per_signal: must be at least 8, got %d", prefix, c.MaxPointsPerSignal))
	}
	return errors.Join(errs...)
}
