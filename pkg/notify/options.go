package notify

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"time"
)

// QueueOptions tune one integration's queue. Zero fields take the defaults
// of DefaultQueueOptions.
type QueueOptions struct {
	// InitialBackoff is the delay before the first retry of a retryable failure.
	InitialBackoff time.Duration `yaml:"initial_backoff"`
	// MaxBackoff caps the exponential backoff.
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// MaxRetryDuration bounds how long one event is retried after its first
	// attempt; then it counts as permanently failed and is reported.
	MaxRetryDuration time.Duration `yaml:"max_retry_duration"`
	// AttemptTimeout bounds one delivery attempt.
	AttemptTimeout time.Duration `yaml:"attempt_timeout"`
	// DrainTimeout bounds the delivery of what is pending at shutdown; what
	// is left stays in the persisted outbox for the next start.
	DrainTimeout time.Duration `yaml:"drain_timeout"`
	// MaxPending bounds the outbox. A full outbox drops the oldest firing
	// update or repeat first, then the oldest trigger, and never a resolve:
	// resolves are admitted beyond the bound. Every drop is counted, logged
	// and reported through the other integrations. At the default a full
	// outbox is about 1.8 MB of JSON, 140 KB as the HA ConfigMap store
	// compresses it: a share of the ConfigMap's 1 MiB.
	MaxPending int `yaml:"max_pending"`
	// ResolvedRetention is how long a resolved incident record is kept to
	// recognise a duplicate resolve.
	ResolvedRetention time.Duration `yaml:"resolved_retention"`
	// MaxRecords caps the incident records kept (they are persisted with the
	// outbox, in HA in a ConfigMap of at most 1 MiB). Beyond it the oldest
	// resolved records go first, then the oldest open delivery-failure
	// notices, then the oldest open incidents (counted and logged).
	MaxRecords int `yaml:"max_records"`
	// NoticeRetention bounds how long a delivery-failure notice stays open
	// when the failing integration delivers nothing again: then it is
	// resolved as expired and its records pruned.
	NoticeRetention time.Duration `yaml:"notice_retention"`
	// MaxRetryAfter caps the wait a provider may ask for with Retry-After
	// (and a wait restored from the persisted state), so that one bad or
	// hostile header cannot silence an integration for hours.
	MaxRetryAfter time.Duration `yaml:"max_retry_after"`
}

// Defaults that callers outside this package (configuration) name.
const (
	DefaultMaxRetryAfter = 5 * time.Minute
	DefaultMaxRecords    = 1000
)

// DefaultQueueOptions are the defaults for every integration.
func DefaultQueueOptions() QueueOptions {
	return QueueOptions{
		InitialBackoff:    time.Second,
		MaxBackoff:        2 * time.Minute,
		MaxRetryDuration:  30 * time.Minute,
		AttemptTimeout:    15 * time.Second,
		DrainTimeout:      10 * time.Second,
		MaxPending:        1000,
		ResolvedRetention: 7 * 24 * time.Hour,
		MaxRecords:        DefaultMaxRecords,
		NoticeRetention:   24 * time.Hour,
		MaxRetryAfter:     DefaultMaxRetryAfter,
	}
}

// or fills the zero fields of o from d.
func (o QueueOptions) or(d QueueOptions) QueueOptions {
	return QueueOptions{
		InitialBackoff:    cmp.Or(o.InitialBackoff, d.InitialBackoff),
		MaxBackoff:        cmp.Or(o.MaxBackoff, d.MaxBackoff),
		MaxRetryDuration:  cmp.Or(o.MaxRetryDuration, d.MaxRetryDuration),
		AttemptTimeout:    cmp.Or(o.AttemptTimeout, d.AttemptTimeout),
		DrainTimeout:      cmp.Or(o.DrainTimeout, d.DrainTimeout),
		MaxPending:        cmp.Or(o.MaxPending, d.MaxPending),
		ResolvedRetention: cmp.Or(o.ResolvedRetention, d.ResolvedRetention),
		MaxRecords:        cmp.Or(o.MaxRecords, d.MaxRecords),
		NoticeRetention:   cmp.Or(o.NoticeRetention, d.NoticeRetention),
		MaxRetryAfter:     cmp.Or(o.MaxRetryAfter, d.MaxRetryAfter),
	}
}

// withDefaults fills the zero fields from DefaultQueueOptions (Validate has
// rejected negative ones) and keeps MaxBackoff at least InitialBackoff, which
// a configured initial_backoff above the default max_backoff would break.
func (o QueueOptions) withDefaults() QueueOptions {
	o = o.or(DefaultQueueOptions())
	o.MaxBackoff = max(o.MaxBackoff, o.InitialBackoff)
	return o
}

// Validate reports options that cannot work; zero values mean "default".
func (o QueueOptions) Validate() error {
	var errs []error
	neg := func(name string, d time.Duration) {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", name, d))
		}
	}
	neg("initial_backoff", o.InitialBackoff)
	neg("max_backoff", o.MaxBackoff)
	neg("max_retry_duration", o.MaxRetryDuration)
	neg("attempt_timeout", o.AttemptTimeout)
	neg("drain_timeout", o.DrainTimeout)
	neg("resolved_retention", o.ResolvedRetention)
	neg("notice_retention", o.NoticeRetention)
	neg("max_retry_after", o.MaxRetryAfter)
	if o.MaxPending < 0 {
		errs = append(errs, fmt.Errorf("max_pending: must not be negative, got %d", o.MaxPending))
	}
	if o.MaxRecords < 0 {
		errs = append(errs, fmt.Errorf("max_records: must not be negative, got %d", o.MaxRecords))
	}
	if o.MaxBackoff > 0 && o.InitialBackoff > o.MaxBackoff {
		errs = append(errs, fmt.Errorf("max_backoff: %s is below initial_backoff %s", o.MaxBackoff, o.InitialBackoff))
	}
	return errors.Join(errs...)
}

// jitterFraction is the share of a backoff delay that is randomised.
const jitterFraction = 0.2

// Backoff is the delay before retry number retry (1 = the first retry):
// initial·2^(retry-1), capped at max, with the top 20% randomised by u in
// [0,1) so that many queues recovering together do not retry in lockstep.
// The result is never above max.
func Backoff(retry int, initial, max time.Duration, u float64) time.Duration {
	if retry < 1 {
		retry = 1
	}
	d := float64(initial) * math.Pow(2, float64(retry-1))
	if d > float64(max) || math.IsInf(d, 0) {
		d = float64(max)
	}
	return time.Duration(d*(1-jitterFraction) + d*jitterFraction*u)
}
