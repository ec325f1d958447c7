package notify

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// IntegrationLog is the name of the log integration, which receives every
// event whatever the routes say.
const IntegrationLog = "log"

// LogNotifier writes every event as a readable block to w and as one
// structured log line. It never fails: it is the record of what the watchdog
// wanted to say when every other integration is down or not configured.
type LogNotifier struct {
	mu  sync.Mutex
	w   io.Writer
	log *zap.Logger
}

// NewLogNotifier writes blocks to w (nil: none) and lines to logger (nil: none).
func NewLogNotifier(w io.Writer, logger *zap.Logger) *LogNotifier {
	if w == nil {
		w = io.Discard
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &LogNotifier{w: w, log: logger}
}

// Notify implements Notifier.
func (l *LogNotifier) Notify(_ context.Context, ev Event) error {
	l.log.Info("notification",
		zap.String("fingerprint", ev.Fingerprint), zap.Uint64("seq", ev.Seq),
		zap.String("kind", string(ev.Kind)), zap.String("status", string(ev.Status)),
		zap.String("class", ev.Class), zap.String("severity", ev.Severity),
		zap.String("replica", ev.Replica), zap.String("model", ev.Model),
		zap.String("summary", ev.Summary), zap.Strings("explained_by", ev.ExplainedBy))
	block := FormatText(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = io.WriteString(l.w, block)
	return nil
}

// FormatText renders ev as a plain multi-line block for a terminal or log
// file (the demo's "what would have been sent"). Control characters from
// replicas are replaced so one event cannot forge the lines of another.
func FormatText(ev Event) string {
	var b strings.Builder
	state := strings.ToUpper(ev.Severity)
	if ev.Status == StatusResolved || ev.Kind == KindResolve {
		state = "RESOLVED"
	}
	fmt.Fprintf(&b, "=== [%s] %s on %s (%s) ===\n", state, clean(ev.Class), clean(ev.Replica), ev.Kind)
	if ev.Model != "" {
		fmt.Fprintf(&b, "model:       %s\n", clean(ev.Model))
	}
	if ev.Layer != "" {
		fmt.Fprintf(&b, "layer:       %s\n", clean(ev.Layer))
	}
	fmt.Fprintf(&b, "summary:     %s\n", clean(ev.Summary))
	if ev.Diagnosis != "" {
		fmt.Fprintf(&b, "diagnosis:   %s\n", clean(ev.Diagnosis))
	}
	if ev.Triage != "" {
		fmt.Fprintf(&b, "triage:      %s\n", clean(ev.Triage))
	}
	if !ev.StartsAt.IsZero() {
		fmt.Fprintf(&b, "since:       %s\n", ev.StartsAt.UTC().Format("2006-01-02 15:04:05Z"))
	}
	if !ev.EndsAt.IsZero() && !ev.StartsAt.IsZero() {
		fmt.Fprintf(&b, "resolved:    %s (lasted %s)\n", ev.EndsAt.UTC().Format("2006-01-02 15:04:05Z"), ev.EndsAt.Sub(ev.StartsAt).Round(1e9))
	}
	if len(ev.Evidence) > 0 {
		b.WriteString("evidence:\n")
		for _, f := range ev.Evidence {
			fmt.Fprintf(&b, "  - %s\n", clean(FormatField(f)))
		}
	}
	if len(ev.Emergency) > 0 {
		fmt.Fprintf(&b, "do now:      %s\n", clean(ev.Emergency[0]))
	}
	if len(ev.ExplainedBy) > 0 {
		fmt.Fprintf(&b, "explained by: %s\n", clean(strings.Join(ev.ExplainedBy, ", ")))
	}
	if ev.RunbookURL != "" {
		fmt.Fprintf(&b, "runbook:     %s\n", clean(ev.RunbookURL))
	}
	fmt.Fprintf(&b, "fingerprint: %s\n\n", clean(ev.Fingerprint))
	return b.String()
}

// FormatField renders one evidence number as "name: value unit (baseline
// b unit, threshold t)".
func FormatField(f Field) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", f.Name, FormatValue(f.Value, f.Unit))
	var extra []string
	if f.HasBase {
		extra = append(extra, "baseline "+FormatValue(f.Baseline, f.Unit))
	}
	if f.Threshold != "" {
		extra = append(extra, "rule "+f.Threshold)
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(extra, ", "))
	}
	return b.String()
}

// FormatValue renders a number with its unit, compactly.
func FormatValue(v float64, unit string) string {
	var s string
	switch unit {
	case "%":
		return fmt.Sprintf("%.1f%%", v)
	case "ratio":
		return fmt.Sprintf("%.1f%%", v*100)
	default:
		s = fmt.Sprintf("%.3g", v)
		if v >= 1000 || v <= -1000 {
			s = fmt.Sprintf("%.0f", v)
		}
	}
	if unit != "" {
		if strings.HasPrefix(unit, "/") {
			return s + unit
		}
		return s + " " + unit
	}
	return s
}

func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' || (r < 0x20) || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
