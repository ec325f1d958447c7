package notify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Reason is a small, machine-readable category of a failed delivery
// attempt. It is a metric label, so the set is closed.
type Reason string

// Failure reasons.
const (
	ReasonClientError    Reason = "client_error"    // 4xx other than auth and rate limit
	ReasonAuthError      Reason = "auth_error"      // 401/403, invalid or revoked token, unknown routing key
	ReasonRateLimited    Reason = "rate_limited"    // 429
	ReasonServerError    Reason = "server_error"    // 5xx
	ReasonTimeout        Reason = "timeout"         // attempt deadline exceeded
	ReasonNetwork        Reason = "network"         // connection refused/reset, DNS
	ReasonInvalidPayload Reason = "invalid_payload" // the provider rejected the event itself (400, invalid_blocks)
	ReasonQueueFull      Reason = "queue_full"      // evicted from a full queue
	ReasonUnknown        Reason = "unknown"
)

// Reasons lists every Reason, for pre-creating metric label values.
var Reasons = []Reason{
	ReasonClientError, ReasonAuthError, ReasonRateLimited, ReasonServerError,
	ReasonTimeout, ReasonNetwork, ReasonInvalidPayload, ReasonQueueFull, ReasonUnknown,
}

// ErrNothingToSend is returned by a Notifier that decided the event needs no
// request (for example a re-sent trigger for an incident PagerDuty already
// has open). The queue treats it as success and counts it as skipped.
var ErrNothingToSend = errors.New("nothing to send")

// ErrOutboxFull is wrapped by the error reported for an event a full
// outbox dropped (reason queue_full).
var ErrOutboxFull = errors.New("notification outbox full")

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying: the same request would fail
// the same way (bad payload, bad credentials). Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type retryAfterError struct {
	err   error
	after time.Duration
	named bool // the provider named the wait; else the backoff decides
}

func (e *retryAfterError) Error() string {
	if !e.named {
		return fmt.Sprintf("%v (rate limited)", e.err)
	}
	return fmt.Sprintf("%v (retry after %s)", e.err, e.after)
}
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as retryable no earlier than d from now: the provider
// asked us to wait (HTTP 429 with Retry-After). The queue holds every event
// of the integration until then. RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	if d < 0 {
		d = 0
	}
	return &retryAfterError{err: err, after: d, named: true}
}

// Throttled marks err as a rate limit whose provider named no wait (HTTP
// 429 without a usable Retry-After). The queue holds every event of the
// integration for the event's exponential backoff, from the initial
// delay: a fixed pause would delay a critical page by as much each time.
// Throttled(nil) is nil.
func Throttled(err error) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err}
}

// ThrottledBy classifies a 429 by its response header: RetryAfter with the
// wait Retry-After names (seconds, or an HTTP date against the response's
// Date), else Throttled.
func ThrottledBy(err error, h http.Header) error {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if s, perr := strconv.Atoi(v); perr == nil && s >= 0 {
		return RetryAfter(err, time.Duration(s)*time.Second)
	}
	at, aerr := http.ParseTime(v)
	sent, serr := http.ParseTime(h.Get("Date"))
	if aerr == nil && serr == nil {
		return RetryAfter(err, at.Sub(sent))
	}
	return Throttled(err)
}

// RetryAfterOf returns the delay requested with RetryAfter; ok is false
// for an error Throttled left to the backoff.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) && r.named {
		return r.after, true
	}
	return 0, false
}

// IsThrottled reports a rate limit, with or without a named wait.
func IsThrottled(err error) bool {
	var r *retryAfterError
	return errors.As(err, &r)
}

type reasonError struct {
	err    error
	reason Reason
}

func (e *reasonError) Error() string { return e.err.Error() }
func (e *reasonError) Unwrap() error { return e.err }

// WithReason attaches a failure reason to err. WithReason(nil, r) is nil.
func WithReason(err error, r Reason) error {
	if err == nil {
		return nil
	}
	return &reasonError{err: err, reason: r}
}

// ReasonOf classifies err: an attached reason wins, then rate limits,
// timeouts and network errors are recognised; anything else is unknown.
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var re *reasonError
	if errors.As(err, &re) {
		return re.reason
	}
	if IsThrottled(err) {
		return ReasonRateLimited
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return ReasonTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ReasonTimeout
	}
	var ue *url.Error
	var oe *net.OpError
	if errors.As(err, &ne) || errors.As(err, &ue) || errors.As(err, &oe) {
		return ReasonNetwork
	}
	return ReasonUnknown
}

// ReasonForStatus maps an HTTP status code to a failure reason.
func ReasonForStatus(code int) Reason {
	switch {
	case code == http.StatusTooManyRequests:
		return ReasonRateLimited
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return ReasonAuthError
	case code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge:
		return ReasonInvalidPayload
	case code == http.StatusRequestTimeout:
		return ReasonTimeout
	case code >= 500:
		return ReasonServerError
	case code >= 400:
		return ReasonClientError
	}
	return ReasonUnknown
}

// ForStatus classifies err, the failure of a request its server answered
// with status code and header h, for the queue: 429 is a rate limit
// (ThrottledBy), 408 and 5xx are retried, any other 4xx is permanent (the
// same request would fail again), and any other answer that is not 2xx
// (1xx, a 3xx not followed: a proxy in front may be reconfigured) is
// retried. The reason is ReasonForStatus(code).
func ForStatus(err error, code int, h http.Header) error {
	err = WithReason(err, ReasonForStatus(code))
	switch {
	case code == http.StatusTooManyRequests:
		return ThrottledBy(err, h)
	case code == http.StatusRequestTimeout || code >= 500:
		return err
	case code >= 400:
		return Permanent(err)
	}
	return err
}
