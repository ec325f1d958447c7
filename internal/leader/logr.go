package leader

import (
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"go.uber.org/zap"
)

// zapSink routes client-go's leader-election log (klog's contextual
// logger) into the daemon's zap logger, so it comes out as the same JSON
// lines. Its informational messages ("attempting to acquire leader lease")
// go to debug: the Elector logs every change itself. Its errors (the Lease
// cannot be read or written: RBAC, API server down) are warnings, logged
// once per distinct message in a row, since it retries every retry period.
type zapSink struct {
	log  *zap.Logger
	last *lastError
}

type lastError struct {
	mu  sync.Mutex
	msg string
}

// Logr adapts l for client-go. The Elector uses it for leader election;
// main may install it for every client-go component (discovery's
// informers, the REST client's warnings) with klog.SetLogger.
func Logr(l *zap.Logger) logr.Logger {
	return logr.New(&zapSink{log: l.WithOptions(zap.AddCallerSkip(1)), last: &lastError{}})
}

func (s *zapSink) Init(logr.RuntimeInfo) {}

// Enabled keeps klog's V(0) only: higher verbosities are per-renewal detail.
func (s *zapSink) Enabled(level int) bool { return level <= 0 }

func (s *zapSink) Info(_ int, msg string, kv ...any) {
	s.log.Debug(msg, fields(kv)...)
}

func (s *zapSink) Error(err error, msg string, kv ...any) {
	key := msg
	if err != nil {
		key += ": " + err.Error()
	}
	s.last.mu.Lock()
	repeated := s.last.msg == key
	s.last.msg = key
	s.last.mu.Unlock()
	f := append(fields(kv), zap.Error(err))
	if repeated {
		s.log.Debug(msg, f...)
		return
	}
	s.log.Warn(msg, f...)
}

func (s *zapSink) WithValues(kv ...any) logr.LogSink {
	return &zapSink{log: s.log.With(fields(kv)...), last: s.last}
}

func (s *zapSink) WithName(name string) logr.LogSink {
	return &zapSink{log: s.log.Named(name), last: s.last}
}

func fields(kv []any) []zap.Field {
	out := make([]zap.Field, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, zap.Any(fmt.Sprint(kv[i]), kv[i+1]))
	}
	return out
}
