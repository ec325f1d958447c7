// Package notifytest provides realistic sample events, a recording Notifier
// and an in-memory Store for tests of notify, its integrations and the
// daemon's end-to-end test.
package notifytest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// T0 is the fixed instant sample incidents start at.
var T0 = time.Date(2026, 3, 14, 9, 26, 40, 0, time.UTC)

// BaseURL is the daemon's external URL in sample events.
const BaseURL = "https://watchdog.example.internal:9464"

// trigger makes ev the first page of its incident, at time at, with the
// links the daemon adds.
func trigger(at time.Time, ev notify.Event) notify.Event {
	ev.Seq = 1
	ev.Kind = notify.KindTrigger
	ev.Status = notify.StatusFiring
	ev.StartsAt, ev.At = at, at
	ev.RunbookURL = BaseURL + "/runbooks/" + ev.Class
	ev.Incident = fmt.Sprintf("%s-%d", ev.Fingerprint, T0.Unix())
	ev.AlertURL = BaseURL + "/incidents/" + ev.Incident
	return ev
}

// PreemptStorm is a critical trigger: KV-cache pressure makes the scheduler
// retract running requests, explained by a cache collapse.
func PreemptStorm(at time.Time) notify.Event {
	return trigger(at, notify.Event{
		Fingerprint: "5f1c0e7a9b3d2c41",
		Class:       "preempt_storm",
		Severity:    detect.Critical,
		Replica:     "llama-70b-0",
		Model:       "meta-llama/Llama-3.1-70B-Instruct",
		Layer:       "kv_memory",
		Summary:     "Requests are being retracted at 4.2/s (baseline 0.05/s) with the KV cache 97% full",
		Diagnosis: "The KV cache is exhausted, so the scheduler evicts running requests and re-queues them; " +
			"their work is recomputed, throughput falls and the queue grows. The cache hit rate collapsed " +
			"at the same time, which is the likely cause.",
		Evidence: []notify.Field{
			{Name: "retractions", Value: 4.2, Baseline: 0.05, HasBase: true, Unit: "/s", Threshold: "> 1/s and > 10x baseline"},
			{Name: "KV cache usage", Value: 0.97, Baseline: 0.71, HasBase: true, Unit: "ratio", Threshold: "> 95%"},
			{Name: "queued requests", Value: 148, Baseline: 9, HasBase: true},
			{Name: "generation throughput", Value: 1830, Baseline: 5120, HasBase: true, Unit: "tok/s"},
		},
		Emergency: []string{
			"Shift traffic away from llama-70b-0 (lower its weight in the router) until retractions stop.",
			"Cap concurrency: lower --max-running-requests on the replica, or shed low-priority traffic.",
		},
		RootCause: []string{
			"Check why prefix-cache hits dropped (prompt template change, cache flushes, a new client).",
			"Raise --mem-fraction-static or move the model to a larger GPU if the cache is simply too small.",
			"Lower --chunked-prefill-size if long prompts arrive in bursts.",
		},
		ExplainedBy: []string{"cache_collapse"},
	})
}

// RetryAvalanche is a warning trigger: clients retry timed-out requests and
// multiply the load.
func RetryAvalanche(at time.Time) notify.Event {
	return trigger(at, notify.Event{
		Fingerprint: "9a4e61d07c2b8f53",
		Class:       "retry_avalanche",
		Severity:    detect.Warning,
		Replica:     "qwen-32b-gw",
		Model:       "Qwen/Qwen2.5-32B-Instruct",
		Layer:       "client",
		Summary:     "Request rate tripled (37/s vs 12/s) while completions stayed flat and 18% of requests are aborted",
		Diagnosis: "Clients time out and retry: arrivals grow but finished requests do not, and aborted requests " +
			"rise. Each retry adds prefill work to an already slow replica, so latency feeds the retries.",
		Evidence: []notify.Field{
			{Name: "request rate", Value: 37.4, Baseline: 12.1, HasBase: true, Unit: "/s", Threshold: "> 2.5x baseline"},
			{Name: "completion rate", Value: 11.8, Baseline: 11.9, HasBase: true, Unit: "/s"},
			{Name: "aborted requests", Value: 0.18, Baseline: 0.004, HasBase: true, Unit: "ratio", Threshold: "> 5%"},
			{Name: "time to first token p95", Value: 21.5, Baseline: 1.9, HasBase: true, Unit: "s"},
		},
		Emergency: []string{
			"Ask the calling service to back off (exponential backoff with jitter, retry budget) or rate-limit it at the gateway.",
			"Add capacity or move traffic to healthy replicas so queued requests finish before client timeouts.",
		},
		RootCause: []string{
			"Align client timeouts with the replica's real p99 latency under load.",
			"Enforce a retry budget in the client library.",
		},
		ExplainedBy: []string{"preempt_storm"},
	})
}

// CacheCollapse is a warning trigger: the prefix-cache hit rate collapsed.
func CacheCollapse(at time.Time) notify.Event {
	return trigger(at, notify.Event{
		Fingerprint: "c3d8a2f15e6b7094",
		Class:       "cache_collapse",
		Severity:    detect.Warning,
		Replica:     "llama-70b-0",
		Model:       "meta-llama/Llama-3.1-70B-Instruct",
		Layer:       "kv_memory",
		Summary:     "Prefix-cache hit rate fell to 4% (baseline 62%) and prefill tokens per request doubled",
		Diagnosis: "Shared prompt prefixes are no longer reused, so every request pays full prefill and holds " +
			"more KV cache. Typical causes: a changed system prompt or template, per-request nonces early in " +
			"the prompt, or cache flushes.",
		Evidence: []notify.Field{
			{Name: "cache hit rate", Value: 0.04, Baseline: 0.62, HasBase: true, Unit: "ratio", Threshold: "< 25% of baseline"},
			{Name: "prefill tokens per request", Value: 3900, Baseline: 1850, HasBase: true, Unit: "tok"},
			{Name: "KV cache usage", Value: 0.93, Baseline: 0.71, HasBase: true, Unit: "ratio"},
		},
		Emergency: []string{
			"Find the client whose prompts changed (gateway logs by API key) and roll the change back if possible.",
		},
		RootCause: []string{
			"Keep stable content at the start of prompts and move per-request data to the end.",
			"Check for /flush_cache calls or restarts that empty the radix cache.",
		},
		Explains: []string{"preempt_storm", "retry_avalanche"},
	})
}

// Samples are the three core incident classes firing at T0.
func Samples() []notify.Event {
	return []notify.Event{PreemptStorm(T0), RetryAvalanche(T0), CacheCollapse(T0)}
}

// Resolve returns the resolve event of ev's incident at time at.
func Resolve(ev notify.Event, at time.Time) notify.Event {
	ev.Seq++
	ev.Kind = notify.KindResolve
	ev.Status = notify.StatusResolved
	ev.EndsAt = at
	ev.At = at
	if ev.AlertURL != "" {
		ev.PostmortemURL = ev.AlertURL + "/postmortem"
	}
	return ev
}

// Update returns a still-firing update of ev at time at with severity sev.
func Update(ev notify.Event, at time.Time, sev detect.Severity) notify.Event {
	ev.Seq++
	ev.Kind = notify.KindUpdate
	ev.Severity = sev
	ev.At = at
	return ev
}

// Attempt is one call a Recorder received.
type Attempt struct {
	Event notify.Event
	At    time.Time // time.Now() at the call (fake time inside a synctest bubble)
	Err   error     // what the Recorder returned
}

// Recorder is a Notifier that records every attempt. Fail, when set, decides
// the result of attempt n (0-based, counted over all events).
type Recorder struct {
	Fail func(ev notify.Event, n int) error

	mu       sync.Mutex
	attempts []Attempt
}

// Notify implements notify.Notifier.
func (r *Recorder) Notify(ctx context.Context, ev notify.Event) error {
	r.mu.Lock()
	n := len(r.attempts)
	fail := r.Fail
	r.mu.Unlock()
	var err error
	if fail != nil {
		err = fail(ev, n)
	}
	r.mu.Lock()
	r.attempts = append(r.attempts, Attempt{Event: ev, At: time.Now(), Err: err})
	r.mu.Unlock()
	return err
}

// Attempts returns every call so far.
func (r *Recorder) Attempts() []Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Attempt(nil), r.attempts...)
}

// Delivered returns the events whose attempt succeeded, in order.
func (r *Recorder) Delivered() []notify.Event {
	var out []notify.Event
	for _, a := range r.Attempts() {
		if a.Err == nil {
			out = append(out, a.Event)
		}
	}
	return out
}

// MemStore is an in-memory notify.Store that round-trips documents through
// JSON like the state directory does.
type MemStore struct {
	mu      sync.Mutex
	docs    map[string][]byte
	saveErr error
	saves   int
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{docs: map[string][]byte{}} }

// Load implements notify.Store. A corrupt document is removed and reported.
func (s *MemStore) Load(name string, v any, _ time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.docs[name]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		delete(s.docs, name)
		return fmt.Errorf("state %s: corrupt, moved aside: %w", name, err)
	}
	return nil
}

// Save implements notify.Store.
func (s *MemStore) Save(name string, v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.saveErr != nil {
		return s.saveErr
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.docs[name] = b
	s.saves++
	return nil
}

// SetSaveError makes every later Save fail with err (nil: succeed again).
func (s *MemStore) SetSaveError(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saveErr = err
}

// Put stores raw bytes as document name (for corrupt-state tests).
func (s *MemStore) Put(name string, raw []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.docs[name] = append([]byte(nil), raw...)
}

// Raw returns the stored bytes of document name.
func (s *MemStore) Raw(name string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.docs[name]...)
}

// Names lists the stored documents.
func (s *MemStore) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.docs {
		out = append(out, n)
	}
	return out
}
