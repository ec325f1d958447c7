package notify

import "time"

// Attempt is the outcome of one delivery attempt of one event to one
// integration, as the incident journal records it.
type Attempt struct {
	Integration string
	Event       Event
	// Number counts the attempts of this event at this integration, from
	// 1; 0 for an event dropped from a full outbox without an attempt.
	Number int
	At     time.Time
	// Delivered says the provider accepted the event.
	Delivered bool
	// Reason classifies a failure. It is all a failure carries: an error's
	// text may quote a provider's response or a webhook URL (a secret).
	Reason Reason
	// GaveUp says the failure was final: the event will not be delivered.
	GaveUp bool
}

// reportAttempt tells the dispatcher's observer of an attempt, if any.
func (q *Queue) reportAttempt(a Attempt) {
	if q.onAttempt != nil {
		a.Integration = q.name
		q.onAttempt(a)
	}
}
