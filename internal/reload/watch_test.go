package reload

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
)

// The watcher calls back once per change of content: not for a rewrite of
// the same bytes, not while the file is missing (as during a ConfigMap's
// symlink swap), and once when it comes back changed.
func TestFileWatcherCallsOncePerContentChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "watchdog.yaml")
		write := func(s string) {
			if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		write("a: 1\n")
		var changes atomic.Int32
		w := NewFileWatcher(path, 10*time.Second, func() { changes.Add(1) }, zap.NewNop())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		step := func(what string, want int32) {
			t.Helper()
			time.Sleep(10*time.Second + time.Millisecond)
			synctest.Wait()
			if got := changes.Load(); got != want {
				t.Fatalf("after %s: %d changes, want %d", what, got, want)
			}
		}
		step("nothing", 0)
		write("a: 1\n")
		step("the same content written again", 0)
		write("a: 2\n")
		step("a change", 1)
		step("no further change", 1)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		step("the file gone", 1)
		write("a: 3\n")
		step("the file back with new content", 2)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
