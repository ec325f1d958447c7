package notify

import (
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Impact is what users feel on one replica at one moment, from its
// snapshot. A nil field is a value the replica does not report.
type Impact struct {
	Queued          *float64 `json:"queued,omitempty"`
	TTFTP99         *float64 `json:"ttft_p99_seconds,omitempty"`
	AbortsPerSecond *float64 `json:"aborts_per_second,omitempty"`
}

// Compose writes an incident event's words from its facts: the headline,
// the notes the diagnosis gets from the incident's state (draining, the
// incident it follows, the incident that took it in) and the reason an
// incident ended other than by its signals. The alert tracker's events
// are composed once, as they are made; renderers read the words.
func Compose(ev Event) Event {
	ev.Headline = headline(ev)
	note := func(s string) { ev.Diagnosis = strings.TrimSpace(ev.Diagnosis + " " + s) }
	if ev.Draining {
		note("The cause has cleared; what it caused is still draining, so the incident stays open.")
	}
	if ev.After != "" {
		note("It began as an incident on this replica ended (" + ev.After +
			") and is still there after the aftermath window: it is not that incident's drain.")
	}
	if ev.AbsorbedInto != "" {
		note("This alert became part of another incident (" + ev.AbsorbedInto +
			"), which explains it; it ends with that incident or when its own condition clears.")
	}
	if ev.Reason != "" {
		ev.Headline = ev.Reason + ": " + ev.Headline
		ev.Summary = ev.Reason + ": " + ev.Summary
	}
	return ev
}

// headline is the page's one line: where, what is happening (the cause),
// and what users feel now (queue and time to first token) when known.
//
// A resolve's headline says what ended and how long it lasted, with the
// values now: the numbers of the firing summary would read as still
// burning.
func headline(ev Event) string {
	where := ev.Replica
	if ev.Fleet {
		where = "fleet " + ev.Model
	}
	resolved := ev.Kind == KindResolve
	h := where + ": " + ev.Summary
	if resolved {
		h = where + ": " + strings.ReplaceAll(ev.Class, "_", " ") + " over"
		if !ev.StartsAt.IsZero() {
			h += " after " + FormatDuration(ev.At.Sub(ev.StartsAt))
		}
	}
	if ev.Impact == nil {
		return h
	}
	// An impact number the summary already states is not repeated.
	var impact []string
	add := func(label string, v *float64, unit string, onlyPositive bool) {
		if v == nil || (onlyPositive && *v <= 0) {
			return
		}
		n := detect.FormatNumber(*v)
		if !resolved && (strings.Contains(ev.Summary, n) || strings.Contains(strings.ToLower(ev.Summary), label)) {
			return
		}
		impact = append(impact, label+" "+n+unit)
	}
	add("queue", ev.Impact.Queued, "", false)
	add("p99 TTFT", ev.Impact.TTFTP99, " s", false)
	add("aborted", ev.Impact.AbortsPerSecond, "/s", true)
	switch {
	case len(impact) == 0:
	case resolved:
		h += "; now " + strings.Join(impact, ", ")
	default:
		h += "; " + strings.Join(impact, ", ")
	}
	return h
}
