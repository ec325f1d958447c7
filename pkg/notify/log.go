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
		zap.String("class", ev.Class), zap.Stringer("severity", ev.Severity),
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
	fmt.Fprintf(&b, "=== %s ===\n", clean(Title(ev)))
	line := func(label, value string) {
		if value != "" {
			fmt.Fprintf(&b, "%-15s %s\n", label+":", clean(value))
		}
	}
	// One greppable line per event: state, class, replica, kind.
	line("event", fmt.Sprintf("%s %s on %s (%s) #%d", StateWord(ev), ev.Class, ev.Replica, ev.Kind, ev.Seq))
	line("model", ev.Model)
	line("layer", ev.Layer)
	line(strings.ToLower(DiagnosisLabel(ev)), strings.TrimSpace(ev.Diagnosis))
	line("triage", Triage(ev))
	if !ev.StartsAt.IsZero() {
		line("since", ev.StartsAt.UTC().Format("2006-01-02 15:04:05Z"))
	}
	if Resolved(ev) && !ev.EndsAt.IsZero() {
		line("resolved", ev.EndsAt.UTC().Format("2006-01-02 15:04:05Z"))
	}
	if Resolved(ev) {
		if rs := Recoveries(ev); len(rs) > 0 {
			b.WriteString("recovered (" + NowLabel(ev) + ", peak):\n")
			for _, r := range rs {
				fmt.Fprintf(&b, "  - %s\n", clean(r.Text()))
			}
		}
	} else if fs := Shown(ev.Evidence); len(fs) > 0 {
		b.WriteString("evidence:\n")
		for _, f := range fs {
			fmt.Fprintf(&b, "  - %s\n", clean(FormatField(f)))
		}
	}
	if !Resolved(ev) && len(ev.Emergency) > 0 {
		line("do now", ev.Emergency[0])
	}
	line("explained by", strings.Join(ev.ExplainedBy, ", "))
	line("explains", strings.Join(ev.Explains, ", "))
	line("runbook", ev.RunbookURL)
	line("alert", ev.AlertURL)
	line("postmortem", ev.PostmortemURL)
	line("fingerprint", ev.Fingerprint)
	b.WriteString("\n")
	return b.String()
}

func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' || (r < 0x20) || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
