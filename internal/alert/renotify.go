package alert

import (
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Renotify builds a new event of kind for the firing alert fp with its
// content as of round (the next sequence number), for a caller that held
// back the alert's earlier events and must now send where it stands. false
// when fp is not firing.
func (t *Tracker) Renotify(fp string, kind notify.Kind, round assess.Round) (notify.Event, bool) {
	a, ok := t.alerts[fp]
	if !ok || a.State != StateFiring {
		return notify.Event{}, false
	}
	return t.event(a, kind, round), true
}
