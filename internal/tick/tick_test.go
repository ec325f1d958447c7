package tick

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestEveryCallsEachIntervalUntilDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		ctx, cancel := context.WithCancel(t.Context())
		var at []time.Duration
		done := make(chan struct{})
		go func() {
			Every(ctx, 10*time.Second, func(now time.Time) { at = append(at, now.Sub(start)) })
			close(done)
		}()
		time.Sleep(35 * time.Second)
		synctest.Wait()
		cancel()
		<-done
		want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("calls at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Errorf("call %d at %v, want %v", i, at[i], want[i])
			}
		}
	})
}

func TestEverySlowCallDropsMissedTicks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		calls := 0
		done := make(chan struct{})
		go func() {
			Every(ctx, 10*time.Second, func(time.Time) {
				calls++
				if calls == 1 {
					time.Sleep(35 * time.Second) // a round that overruns three ticks
				}
			})
			close(done)
		}()
		time.Sleep(55 * time.Second) // ticks at 10 (slow until 45), 50
		synctest.Wait()
		cancel()
		<-done
		if calls != 3 {
			t.Errorf("%d calls, want 3: the slow call, the one tick kept while it ran, the tick at 50s", calls)
		}
	})
}
