package notify

import (
	"encoding/json"
	"time"
)

// SetRand fixes the jitter source of q (tests only).
func (q *Queue) SetRand(f func() float64) { q.rand = f }

// HoldUntil is the integration-wide Retry-After hold (tests only).
func (q *Queue) HoldUntil() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.box.doc.HoldUntil
}

// Pending returns the kinds of the undelivered events in order (tests only).
func (q *Queue) Pending() []Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Event
	for _, p := range q.box.doc.Outbox {
		out = append(out, p.Event)
	}
	return out
}

// Document is q's state document as the store would hold it (tests only).
func (q *Queue) Document() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	b, err := json.Marshal(&q.box.doc)
	if err != nil {
		panic(err)
	}
	return b
}

var Plan = plan
