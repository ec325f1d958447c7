package reload

import (
	"context"
	"crypto/sha256"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/tick"
)

// FileWatcher calls onChange when a file's content changes. It compares
// the content's hash every interval rather than watching file-system
// events: a Kubernetes ConfigMap mount changes by swapping a symlink in
// the directory above the file, which an inotify watch on the file never
// sees.
type FileWatcher struct {
	path     string
	interval time.Duration
	onChange func()
	log      *zap.Logger
}

// NewFileWatcher watches path every interval; it starts nothing.
func NewFileWatcher(path string, interval time.Duration, onChange func(), logger *zap.Logger) *FileWatcher {
	return &FileWatcher{path: path, interval: interval, onChange: onChange, log: logger}
}

// Run compares the content with what it was when Run started, then with
// what it was at the last change, until ctx is done. A file that cannot be
// read is logged (once until it can be read again) and counts as
// unchanged, so a missing mount mid-swap does not reload.
func (w *FileWatcher) Run(ctx context.Context) error {
	last, err := w.hash()
	if err != nil {
		w.log.Warn("configuration file unreadable; watching for it to come back", zap.String("file", w.path), zap.Error(err))
	}
	failing := err != nil
	tick.Every(ctx, w.interval, func(time.Time) {
		sum, err := w.hash()
		if err != nil {
			if !failing {
				w.log.Warn("configuration file unreadable; keeping the running configuration", zap.String("file", w.path), zap.Error(err))
			}
			failing = true
			return
		}
		failing = false
		if sum == last {
			return
		}
		last = sum
		w.log.Info("configuration file changed; reloading", zap.String("file", w.path))
		w.onChange()
	})
	return nil
}

func (w *FileWatcher) hash() ([sha256.Size]byte, error) {
	data, err := os.ReadFile(w.path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(data), nil
}
