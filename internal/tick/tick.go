// Package tick runs a chore every interval until its context is done: the
// shape of the daemon's periodic loops.
package tick

import (
	"context"
	"time"
)

// Every calls fn with the tick's time every interval, the first time one
// interval after the call, and returns when ctx is done. A call of fn that
// outlasts the interval delays the next one; the ticks missed meanwhile are
// dropped, as time.Ticker drops them.
func Every(ctx context.Context, interval time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			fn(now)
		}
	}
}
