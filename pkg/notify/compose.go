package notify

import (
	"strings"
	"time"
	"unicode"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// Impact is what users feel on one replica at one moment, from its
// snapshot. A nil field is a value the replica does not report.
type Impact struct {
	Queued          *float64 `json:"queued,omitempty"`
	TTFTP99         *float64 `json:"ttft_p99_seconds,omitempty"`
	AbortsPerSecond *float64 `json:"aborts_per_second,omitempty"`
	// NoFirstTokenSeconds: over this span requests were queued and none got
	// its first token (TTFTP99 is then unknown: no request to measure).
	NoFirstTokenSeconds *float64 `json:"no_first_token_seconds,omitempty"`
}

// Compose writes an incident event's words from its facts: the headline,
// the notes the diagnosis gets from the incident's state (draining, the
// incident it follows, the incident that took it in) and the reason an
// incident ended other than by its signals. The alert tracker's events
// are composed once, as they are made; renderers read the words.
func Compose(ev Event) Event {
	ev.Headline = headline(ev)
	note := func(s string) { ev.Diagnosis = strings.TrimSpace(ev.Diagnosis + " " + s) }
	if ev.Draining && ev.Kind != KindResolve {
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

// headline is the page's one line: where, what users feel when requests
// fail, what is happening (the cause, and what feeds on itself after it),
// and what users feel now (queue, time to first token, aborts: the
// evidence's number where the replica's own evidence gives one, else its
// last values) when the replica could be read and the line does not
// already say it.
//
// A resolve's headline says what ended and how long it lasted, with the
// values now: the numbers of the firing summary would read as still
// burning.
func headline(ev Event) string {
	where := ev.Replica
	if ev.Fleet {
		where = "fleet " + ev.Model
	}
	title := ev.Title
	if title == "" {
		title = strings.ReplaceAll(ev.Class, "_", " ")
	}
	resolved := ev.Kind == KindResolve
	var lead string
	switch {
	case resolved:
		lead = title + " over"
		if !ev.StartsAt.IsZero() {
			lead += " after " + FormatDuration(ev.At.Sub(ev.StartsAt))
		}
	case ev.Draining:
		lead = title + " cleared → " + ev.Summary
	case len(ev.Sustaining) > 0:
		chain := title
		for _, s := range ev.Sustaining {
			chain += " → " + lowerFirst(s)
		}
		lead = chain + ": " + trimTitle(ev.Summary, title)
	default:
		lead = ev.Summary
	}
	if ev.Failing != "" && !resolved {
		// Its first clause: the share failing; the rest is on the page.
		failing, _, _ := strings.Cut(ev.Failing, " — ")
		lead = failing + " — " + lead
	}
	h := where + ": " + lead
	if ev.Impact == nil {
		return h
	}
	// An impact the line already states is not given again, with another
	// number for the same quantity.
	said := strings.ToLower(lead)
	var impact []string
	add := func(key, label string, words []string, v *float64, unit string, onlyPositive bool) {
		if !resolved {
			// The evidence gives the quantity over the detector's range:
			// the line gives that number, not a second one from the
			// snapshot that would disagree with it.
			if f, ok := ownEvidence(ev.Evidence, key); ok {
				v = &f.Value
			}
		}
		if v == nil || (onlyPositive && *v <= 0) {
			return
		}
		n := detect.FormatNumber(*v)
		if !resolved {
			if statesNumber(lead, n, unit) {
				return
			}
			for _, w := range words {
				if strings.Contains(said, w) {
					return
				}
			}
		}
		impact = append(impact, label+" "+n+unit)
	}
	add("queue", "queue", []string{"queue"}, ev.Impact.Queued, "", false)
	// An objective's threshold ("TTFT ≤ 1s" of an SLO burn on the page)
	// is no TTFT users felt: only a stated p99 or time to first token is.
	add("ttft_p99", "p99 TTFT", []string{"ttft p99", "p99 ttft", "time to first token"}, ev.Impact.TTFTP99, " s", false)
	if ev.Impact.TTFTP99 == nil && ev.Impact.NoFirstTokenSeconds != nil && !resolved && !strings.Contains(said, "token") {
		impact = append(impact, "no first token in "+detect.ShortDuration(time.Duration(*ev.Impact.NoFirstTokenSeconds)*time.Second))
	}
	add("aborts", "aborted", []string{"aborted"}, ev.Impact.AbortsPerSecond, "/s", true)
	switch {
	case len(impact) == 0:
	case resolved:
		h += "; now " + strings.Join(impact, ", ")
	default:
		h += "; " + strings.Join(impact, ", ")
	}
	return h
}

// ownEvidence is the shown evidence field of the incident's own replica
// that measures key (not one of a gateway in front of it).
func ownEvidence(evidence []Field, key string) (Field, bool) {
	for _, f := range Shown(evidence) {
		if sig, ok := signalOf(f); ok && sig.key == key && f.Replica == "" {
			return f, true
		}
	}
	return Field{}, false
}

// lowerFirst lowers a title's first letter when the word is not an
// acronym ("Retry avalanche" → "retry avalanche", "KV cache" stays).
func lowerFirst(s string) string {
	r := []rune(s)
	if len(r) < 2 || !unicode.IsUpper(r[0]) || unicode.IsUpper(r[1]) {
		return s
	}
	r[0] = unicode.ToLower(r[0])
	return string(r)
}

// trimTitle drops a summary's leading "Title: " (or "Title since 03:12
// UTC: "), which the chain before it already names.
func trimTitle(summary, title string) string {
	if len(summary) <= len(title) || !strings.EqualFold(summary[:len(title)], title) {
		return summary
	}
	if head, rest, ok := strings.Cut(summary, ": "); ok && !strings.Contains(head[len(title):], ",") {
		return strings.TrimSpace(rest)
	}
	return summary
}

// statesNumber reports whether text gives the number n, followed by unit,
// as a number of its own: "1" with unit "/s" is stated by "aborted 1/s",
// not by "100% full", "0.1/s" or "179 queued"; "2" without a unit is not
// stated by "for 2m" or "2%", other quantities.
func statesNumber(text, n, unit string) bool {
	digit := func(b byte) bool { return b >= '0' && b <= '9' }
	unitOf := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '%' }
	want := n + unit
	for from := 0; ; {
		i := strings.Index(text[from:], want)
		if i < 0 {
			return false
		}
		start, end := from+i, from+i+len(want)
		before := start == 0 || !(digit(text[start-1]) || text[start-1] == '.')
		after := end == len(text) || !(digit(text[end]) || unitOf(text[end]) || text[end] == '.' && end+1 < len(text) && digit(text[end+1]))
		if before && after {
			return true
		}
		from = start + 1
	}
}
