package discovery

import (
	"maps"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// lastKnown keeps the last good targets of each key of a periodic source
// (a DNS name, a target file). A failed refresh of a key keeps its
// targets, so a resolver hiccup or a half-written file never drops part of
// the fleet; it is counted every time and logged once per distinct error,
// and the recovery is logged.
type lastKnown struct {
	failures prometheus.Counter
	logger   *zap.Logger
	// keyField names the key in the logs; failedMsg and recoveredMsg are
	// their messages.
	keyField, failedMsg, recoveredMsg string

	mu    sync.Mutex
	byKey map[string][]scrape.Target

	lastErr map[string]string // the refreshing goroutine's only
}

func newLastKnown(failures prometheus.Counter, logger *zap.Logger, keyField, failedMsg, recoveredMsg string) *lastKnown {
	return &lastKnown{failures: failures, logger: logger, keyField: keyField, failedMsg: failedMsg, recoveredMsg: recoveredMsg,
		byKey: map[string][]scrape.Target{}, lastErr: map[string]string{}}
}

// failed counts and, when its error is new, logs a failed refresh of key.
func (k *lastKnown) failed(key string, err error) {
	k.failures.Inc()
	if msg := err.Error(); k.lastErr[key] != msg {
		k.lastErr[key] = msg
		k.logger.Warn(k.failedMsg, zap.String(k.keyField, key), zap.Int("kept", len(k.of(key))), zap.Error(err))
	}
}

// set records key's targets after a good refresh and reports whether they
// changed.
func (k *lastKnown) set(key string, targets []scrape.Target) (changed bool) {
	if _, failed := k.lastErr[key]; failed {
		delete(k.lastErr, key)
		k.logger.Info(k.recoveredMsg, zap.String(k.keyField, key), zap.Int("targets", len(targets)))
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if prev, ok := k.byKey[key]; ok && slices.EqualFunc(prev, targets, scrape.Target.Equal) {
		return false
	}
	k.byKey[key] = targets
	return true
}

// forget drops key with its targets and returns how many it had, and
// whether it had any record.
func (k *lastKnown) forget(key string) (targets int, had bool) {
	delete(k.lastErr, key)
	k.mu.Lock()
	defer k.mu.Unlock()
	ts, had := k.byKey[key]
	delete(k.byKey, key)
	return len(ts), had
}

// of returns key's last good targets.
func (k *lastKnown) of(key string) []scrape.Target {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.byKey[key]
}

// keys returns the keys with a record, sorted.
func (k *lastKnown) keys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Sorted(maps.Keys(k.byKey))
}
