package alert

import (
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Change is what happened to an incident in a round.
type Change string

// Changes, in the order a round applies them to one incident.
const (
	// Opened: a group no open incident continues started a new one,
	// pending. Also an incident restored after a restart.
	Opened Change = "opened"
	// Renamed: the incident's cause changed (FromClass was the old one):
	// a consequence paged first is now named after the cause found since.
	Renamed Change = "renamed"
	// Joined: classes joined the incident as consequences (Classes).
	Joined Change = "joined"
	// Absorbed: the incident took in Other, an incident its group shows
	// (a cause and a consequence paged apart, or a replica's incident a
	// fleet incident covers). Other pages nothing more until it ends.
	Absorbed Change = "absorbed"
	// Fired: pending -> firing.
	Fired Change = "fired"
	// Escalated: a firing incident's severity rose (FromSeverity was the
	// old one).
	Escalated Change = "escalated"
	// Grew: a firing incident's impact grew materially since its last page
	// (a class joined, failures rose): an update, at most one per
	// update_interval.
	Grew Change = "grew"
	// Repeated: a firing incident is paged again after repeat_interval,
	// or again after a silence that held its pages ended.
	Repeated Change = "repeated"
	// Seen: this round's group continues the incident (Group): its
	// evidence this round.
	Seen Change = "seen"
	// Resolved: firing -> resolved (Reason says why when it was not its
	// signals: a target removed).
	Resolved Change = "resolved"
	// Dropped: a pending incident cleared or was absorbed before it
	// fired; it never paged and is no incident.
	Dropped Change = "dropped"
)

// Transition is one change of one incident in one round.
type Transition struct {
	Change Change
	At     time.Time
	// Incident is the incident as the round left it.
	Incident Incident
	// Page is the notification the change calls for, "" for none. Each
	// incident gets at most one page a round.
	Page notify.Kind

	FromClass    detect.Class    // Renamed
	FromSeverity detect.Severity // Escalated
	Classes      []detect.Class  // Joined
	Other        Incident        // Absorbed: the incident taken in
	// Group is the round's group the incident continues (Seen).
	Group correlate.Group
	// Reason says why an incident resolved other than by its signals
	// ("target removed"); "" otherwise.
	Reason string
}
