package app

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
)

// The stages stop in the order given, each after the one before it has
// stopped, whether the daemon's context ends or a component returns; a
// component's error is returned.
func TestStagesStopInOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failing bool
	}{{"context ends", false}, {"a component fails", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var mu sync.Mutex
				var stopped []string
				component := func(name string, lingers time.Duration) func(context.Context) error {
					return func(ctx context.Context) error {
						<-ctx.Done()
						time.Sleep(lingers) // a drain takes time; the next stage waits for it
						mu.Lock()
						stopped = append(stopped, name)
						mu.Unlock()
						return nil
					}
				}
				boom := errors.New("scrape failed")
				evaluation := []func(context.Context) error{component("loop", time.Second)}
				if tc.failing {
					evaluation = append(evaluation, func(context.Context) error { time.Sleep(time.Minute); return boom })
				}
				stages := []stage{
					{"evaluation", evaluation},
					{"deliveries", []func(context.Context) error{component("dispatcher", 5*time.Second)}},
					{"state", []func(context.Context) error{component("writer", time.Second)}},
					{"lease", []func(context.Context) error{component("elector", 0)}},
					{"http", []func(context.Context) error{component("server", 0)}},
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				err := runStages(ctx, stages, zap.NewNop())
				if want := []string{"loop", "dispatcher", "writer", "elector", "server"}; !slices.Equal(stopped, want) {
					t.Errorf("stopped %v, want %v", stopped, want)
				}
				if tc.failing != errors.Is(err, boom) {
					t.Errorf("err = %v", err)
				}
			})
		})
	}
}
