// Package pagelint checks a page against the rules that keep it true: what
// an engineer woken at 3 a.m. must be able to trust. It reads an event as
// the integrations render it (the text of notify.FormatText, which shares
// notify's wording with Slack and PagerDuty) and the event's own numbers.
// The golden pages and every page the demo sends pass through it; a new
// page gets the checks by being sent.
package pagelint

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Rule names one check.
type Rule string

// The rules.
const (
	// RuleHeadline: a page has a headline, which gives one number per
	// quantity, and the same number as the evidence of that quantity.
	RuleHeadline Rule = "headline"
	// RulePeak: a resolve shows as a peak only a signal that decided the
	// incident (it has a rule or a baseline) or what users felt at worst
	// (queue, TTFT p99, aborts), at a value worse than now and not better
	// than any page of the incident gave for the same quantity.
	RulePeak Rule = "peak"
	// RuleResolve: a resolve does not say the incident goes on.
	RuleResolve Rule = "resolve"
	// RuleTriage: a triage label does not contradict the numbers it prints.
	RuleTriage Rule = "triage"
	// RulePercent: shares are printed in percent.
	RulePercent Rule = "percent"
	// RuleDuplicate: no quantity is given twice in the evidence (a
	// resolve: in what it recovered).
	RuleDuplicate Rule = "duplicate"
	// RuleUnits: numbers carry their units the house way ("3.98 s").
	RuleUnits Rule = "units"
	// RuleFlags: every --flag a page names is a real one.
	RuleFlags Rule = "flags"
)

// Problem is one rule a page breaks.
type Problem struct {
	Rule Rule
	What string
}

func (p Problem) String() string { return string(p.Rule) + ": " + p.What }

// Options of the checks.
type Options struct {
	// Flag reports whether a command-line flag a page names ("--mem-fraction-static")
	// exists; nil: flags are not checked.
	Flag func(flag string) bool
}

var (
	// A usage or a hit rate written as a fraction ("KV usage 0.545",
	// "collapsed to 0.34") where pages write percent.
	fractionShare = regexp.MustCompile(`(?i)(usage|hit rate|collapsed to|share|utilization)[^.;:%\n]{0,24}?\b(0\.\d+|1\.0+|1)\b([^\d%x.]|$)`)
	// Seconds glued to a decimal number ("3.98s").
	gluedSeconds = regexp.MustCompile(`\b\d+\.\d+s\b`)
	notAvailable = regexp.MustCompile(`(?i)\bn/a\b`)
	flagName     = regexp.MustCompile(`(?:^|[\s("'` + "`" + `])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)`)
	// Words a resolve must not say: the incident goes on.
	stillOpen = regexp.MustCompile(`(?i)stays open|still draining|does not heal on its own|users are failing`)
	// "N running (capacity C)" in a triage line.
	runningCapacity = regexp.MustCompile(`(\d+(?:\.\d+)?) running \(capacity (\d+(?:\.\d+)?)\)`)
	queuedCount     = regexp.MustCompile(`(\d+(?:\.\d+)?) (?:queued|waiting)\b`)
	// Headline quantities: "queue 60", "p99 TTFT 0.398 s", "aborted 0.5/s"
	// or "(0.5/s aborted)".
	headlineQuantity = map[string]*regexp.Regexp{
		"queue":    regexp.MustCompile(`(?i)\bqueue (\d+(?:\.\d+)?)\b`),
		"ttft_p99": regexp.MustCompile(`(?i)(?:p99 TTFT|TTFT p99) (\d+(?:\.\d+)?) s\b`),
		"aborts":   regexp.MustCompile(`(?i)\baborted (\d+(?:\.\d+)?)/s\b|\((\d+(?:\.\d+)?)/s aborted\b`),
	}
)

// Check lists the rules ev breaks.
func Check(ev notify.Event, opts Options) []Problem {
	var out []Problem
	bad := func(r Rule, format string, args ...any) {
		if p := (Problem{r, fmt.Sprintf(format, args...)}); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	// What the page says: its log rendering, and every step and sentence
	// of the event whichever integration shows it.
	text := strings.Join(append(append([]string{notify.FormatText(ev), ev.Summary, ev.Diagnosis, ev.Triage}, ev.Emergency...), ev.RootCause...), "\n")
	headline := notify.Headline(ev)
	resolved := notify.Resolved(ev)

	if strings.TrimSpace(ev.Headline) == "" {
		bad(RuleHeadline, "no headline")
	}
	for q, re := range headlineQuantity {
		var seen []string
		for _, m := range re.FindAllStringSubmatch(headline, -1) {
			for _, g := range m[1:] {
				if g != "" {
					seen = append(seen, g)
				}
			}
		}
		if len(seen) > 1 && seen[0] != seen[1] {
			bad(RuleHeadline, "the headline gives %s twice, %s and %s: %q", q, seen[0], seen[1], headline)
		}
		if resolved || len(seen) == 0 {
			continue
		}
		for _, f := range notify.Shown(ev.Evidence) {
			if key, ok := exactSignal(f); ok && key == q && notify.FormatValue(f.Value, f.Unit) != formatLike(seen[0], f.Unit) {
				bad(RuleHeadline, "the headline says %s %s, the evidence %q says %s", q, seen[0], f.Name, notify.FormatValue(f.Value, f.Unit))
			}
		}
	}
	if m := notAvailable.FindString(text); m != "" {
		bad(RuleUnits, "prints %q", m)
	}
	for _, m := range gluedSeconds.FindAllString(text, -1) {
		bad(RuleUnits, "seconds written %q, not \"<n> s\"", m)
	}
	for _, loc := range fractionShare.FindAllStringIndex(text, -1) {
		if loc[0] > 0 && text[loc[0]-1] == '_' {
			continue // a raw metric quoted by name: token_usage=0.5
		}
		bad(RulePercent, "a share written as a fraction, not percent: %q", strings.TrimSpace(text[loc[0]:loc[1]]))
	}
	for _, f := range notify.Shown(ev.Evidence) {
		if r := notify.Rule(f); f.Unit == "ratio" && regexp.MustCompile(`\b0\.\d+\b([^%\dx]|$)`).MatchString(r) {
			bad(RulePercent, "%s is shown in percent but its rule %q is a fraction", f.Name, r)
		}
	}
	// The quantities the page lists: a resolve's are what it recovered
	// and their peaks, taken from every evidence of the incident.
	names := make([]string, 0, len(ev.Evidence))
	for _, f := range ev.Evidence {
		names = append(names, f.Name)
	}
	recoveries := notify.Recoveries(ev)
	if resolved {
		names = names[:0]
		for _, r := range recoveries {
			names = append(names, r.Name)
		}
	}
	seen := map[string]string{}
	for _, name := range names {
		key := notify.Quantity(name)
		if prev, ok := seen[key]; ok {
			bad(RuleDuplicate, "the evidence gives %q and %q", prev, name)
			continue
		}
		seen[key] = name
	}
	if resolved {
		if m := stillOpen.FindString(text); m != "" {
			bad(RuleResolve, "a resolve says %q", m)
		}
		for _, r := range recoveries {
			if r.Peak == nil {
				continue
			}
			if r.Peak.Threshold == "" && !r.Peak.HasBase && !r.Felt {
				bad(RulePeak, "%q is shown at a peak but decided nothing (no rule, no baseline)", r.Name)
			}
		}
	} else {
		out = append(out, triage(ev)...)
	}
	if opts.Flag != nil {
		for _, m := range flagName.FindAllStringSubmatch(text, -1) {
			if !opts.Flag(m[1]) {
				bad(RuleFlags, "%s is on no allow-list of real flags", m[1])
			}
		}
	}
	return out
}

// CheckIncident checks one incident's events in the order they were sent:
// each on its own, and a resolve's peaks against what the pages before it
// said of the same quantity (a peak of "KV cache usage" against a page's
// "KV cache usage (max in range)").
func CheckIncident(evs []notify.Event, opts Options) []Problem {
	var out []Problem
	for i, ev := range evs {
		out = append(out, Check(ev, opts)...)
		if !notify.Resolved(ev) {
			continue
		}
		for _, r := range notify.Recoveries(ev) {
			if r.Peak == nil {
				continue
			}
			p := *r.Peak
			for _, before := range evs[:i] {
				for _, t := range notify.Shown(before.Evidence) {
					if notify.Quantity(t.Name) != notify.Quantity(p.Name) && notify.Quantity(t.Name) != notify.Quantity(r.Name) || t.Unit != p.Unit {
						continue
					}
					if (p.LowerIsWorse && p.Value > t.Value) || (!p.LowerIsWorse && p.Value < t.Value) {
						bad := Problem{RulePeak, fmt.Sprintf("%s peaks at %s, better than the %s its %s #%d said", r.Name,
							notify.FormatValue(p.Value, p.Unit), notify.FormatValue(t.Value, t.Unit), before.Kind, before.Seq)}
						if !slices.Contains(out, bad) {
							out = append(out, bad)
						}
					}
				}
			}
		}
	}
	return out
}

// triage checks the triage line against the numbers it prints and the
// evidence: a label that says the batch has room while it runs at its cap
// or the KV pool is full, or that requests wait while none is queued.
func triage(ev notify.Event) []Problem {
	t := ev.Triage
	if t == "" {
		return nil
	}
	var out []Problem
	bad := func(format string, args ...any) { out = append(out, Problem{RuleTriage, fmt.Sprintf(format, args...)}) }
	lower := strings.ToLower(t)
	if m := runningCapacity.FindStringSubmatch(t); m != nil {
		running, _ := strconv.ParseFloat(m[1], 64)
		capacity, _ := strconv.ParseFloat(m[2], 64)
		if capacity > 0 && running >= 0.9*capacity && (strings.Contains(lower, "running low") || strings.Contains(lower, "room unused")) {
			bad("the triage says the batch has room while %s of %s run: %q", m[1], m[2], t)
		}
	}
	if m := queuedCount.FindStringSubmatch(t); m != nil {
		if n, _ := strconv.ParseFloat(m[1], 64); n == 0 && strings.Contains(lower, "waiting high") {
			bad("the triage says requests wait while %s are queued: %q", m[1], t)
		}
	}
	for _, f := range ev.Evidence {
		if strings.Contains(strings.ToLower(f.Name), "kv cache usage") && f.Unit == "ratio" && f.Value >= 0.9 &&
			(strings.Contains(lower, "leaves room unused") || strings.Contains(lower, "room unused")) {
			bad("the evidence shows the KV pool %s full, the triage says room is left unused: %q", notify.FormatValue(f.Value, f.Unit), t)
		}
	}
	return out
}

// exactSignal is the headline quantity an evidence field gives without a
// qualifier of its own span or statistic ("queued requests", not "queued
// requests (avg)").
func exactSignal(f notify.Field) (string, bool) {
	switch strings.ToLower(f.Name) {
	case "queued requests":
		return "queue", true
	case "time to first token p99", "ttft p99":
		return "ttft_p99", true
	case "aborted requests", "aborted requests/s":
		return "aborts", true
	}
	return "", false
}

// formatLike renders a number read from a headline as notify renders one
// of unit, so the two compare as text.
func formatLike(number, unit string) string {
	v, err := strconv.ParseFloat(number, 64)
	if err != nil {
		return number
	}
	return notify.FormatValue(v, unit)
}
