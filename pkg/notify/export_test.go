package notify

import "time"

// SetRand fixes the jitter source of q (tests only).
func (q *Queue) SetRand(f func() float64) { q.rand = f }

// HoldUntil is the integration-wide Retry-After hold (tests only).
func (q *Queue) HoldUntil() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state.HoldUntil
}

// Pending returns the kinds of the undelivered events in order (tests only).
func (q *Queue) Pending() []Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Event
	for _, p := range q.state.Outbox {
		out = append(out, p.Event)
	}
	return out
}

var Plan = plan
