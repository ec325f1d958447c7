package slack

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Slack's Block Kit limits (runes), enforced before sending because Slack
// rejects the whole message otherwise.
const (
	MaxHeader       = 150
	MaxSectionText  = 3000
	MaxFields       = 10
	MaxFieldText    = 2000
	MaxBlocks       = 50
	MaxFallbackText = 4000
	// MaxTotalText keeps the sum of all block text clear of Slack's
	// undocumented msg_blocks_too_long (~12k characters).
	MaxTotalText = 10000
	maxEvidence  = 30 // three sections of ten fields
	maxSteps     = 15
)

const truncMark = "…(truncated)"

// Truncate cuts s to at most n runes with a visible marker, never inside an
// HTML entity produced by Escape.
func Truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	m := []rune(truncMark)
	if n <= len(m) {
		return string(m[:max(n, 0)])
	}
	cut := r[:n-len(m)]
	if i := lastIndexRune(cut, '&'); i >= 0 && i >= len(cut)-6 && lastIndexRune(cut[i:], ';') < 0 {
		cut = cut[:i] // do not leave "&am" behind
	}
	return string(cut) + truncMark
}

func lastIndexRune(r []rune, c rune) int {
	for i := len(r) - 1; i >= 0; i-- {
		if r[i] == c {
			return i
		}
	}
	return -1
}

var (
	escaper  = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")
	unlinker = strings.NewReplacer("://", ":\u2060//", "www.", "www\u2060.", "WWW.", "WWW\u2060.")
)

// Escape makes a string from a replica inert in Slack text (mrkdwn and
// plain_text alike): &, <, > become entities, so "<!channel>", "<@U123>"
// and "<https://evil|click>" cannot mention or link; a word joiner after the
// "@" of "@channel", "@here" and "@everyone" keeps clients from treating the
// bare words as mentions, and one after the ":" of "://" and the "www" of
// "www." keeps a URL in a label or a model name from being linked.
func Escape(s string) string {
	s = unlinker.Replace(escaper.Replace(s))
	if !strings.ContainsAny(s, "@!") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); i++ {
		b.WriteByte(s[i])
		if s[i] != '@' && s[i] != '!' {
			continue
		}
		for _, word := range []string{"channel", "here", "everyone"} {
			rest := s[i+1:]
			if len(rest) >= len(word) && strings.EqualFold(rest[:len(word)], word) &&
				(len(rest) == len(word) || !isWordByte(rest[len(word)])) {
				b.WriteString("\u2060") // word joiner: shown as nothing, breaks the mention
				break
			}
		}
	}
	return b.String()
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// link renders a trusted, configured URL as a mrkdwn link. A path on the
// watchdog itself (no base URL is known) is shown as text, so the page
// still names its runbook and alert; anything else gives "". Characters
// that would end the link are encoded.
func link(raw, label string) string {
	u, err := url.Parse(raw)
	if err == nil && u.Scheme == "" && u.Host == "" && strings.HasPrefix(u.Path, "/") {
		return Escape(label) + ": `" + Escape(u.String()) + "` on the watchdog"
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ""
	}
	s := strings.NewReplacer("<", "%3C", ">", "%3E", "|", "%7C", "&", "&amp;", " ", "%20").Replace(u.String())
	return "<" + s + "|" + Escape(label) + ">"
}

func resolved(ev notify.Event) bool { return notify.Resolved(ev) }

func emoji(ev notify.Event) string {
	if resolved(ev) {
		return ":white_check_mark:"
	}
	switch ev.Severity {
	case detect.Critical:
		return ":red_circle:"
	case detect.Warning:
		return ":large_orange_circle:"
	default:
		return ":large_blue_circle:"
	}
}

// FallbackText is the message's top-level text: notifications, screen
// readers, clients without Block Kit. It is the page's title.
func FallbackText(ev notify.Event) string {
	return Truncate(Escape(notify.Title(ev)), MaxFallbackText)
}

func mrkdwn(s string) *slackapi.TextBlockObject {
	return slackapi.NewTextBlockObject(slackapi.MarkdownType, s, false, true)
}

func section(text string) *slackapi.SectionBlock {
	return slackapi.NewSectionBlock(mrkdwn(Truncate(text, MaxSectionText)), nil, nil)
}

func steps(title string, in []string) string {
	var b strings.Builder
	b.WriteString(title)
	for i, s := range in {
		if i == maxSteps {
			fmt.Fprintf(&b, "\n…(%d more steps truncated)", len(in)-maxSteps)
			break
		}
		fmt.Fprintf(&b, "\n%d. %s", i+1, Escape(s))
	}
	return b.String()
}

// Blocks renders ev as the incident's Block Kit message: the title as
// header, the diagnosis with the layer triage and the facts, the evidence
// (value vs baseline) or, on a resolve, each signal recovered vs its peak,
// the emergency steps while firing, the root-cause steps, the explanation
// and the links. Limits are enforced and every string from a replica is
// escaped.
func Blocks(ev notify.Event) []slackapi.Block {
	title := Escape(notify.Title(ev))
	header := Truncate(emoji(ev)+" "+title, MaxHeader)
	blocks := []slackapi.Block{slackapi.NewHeaderBlock(slackapi.NewTextBlockObject(slackapi.PlainTextType, header, true, false))}

	var body []string
	if utf8.RuneCountInString(emoji(ev)+" "+title) > MaxHeader {
		body = append(body, "*"+title+"*") // the header had to be cut: the whole title once
	}
	if d := strings.TrimSpace(ev.Diagnosis); d != "" {
		body = append(body, "*"+notify.DiagnosisLabel(ev)+"*\n"+Escape(d))
	}
	if t := notify.Triage(ev); t != "" {
		body = append(body, "*Layer triage*: "+Escape(t))
	}
	var facts []*slackapi.TextBlockObject
	addFact := func(name, value string) {
		if value != "" {
			facts = append(facts, mrkdwn(Truncate("*"+name+"*\n"+value, MaxFieldText)))
		}
	}
	addFact("Replica", Escape(ev.Replica))
	addFact("Model", Escape(ev.Model))
	addFact("Layer", Escape(ev.Layer))
	if !ev.StartsAt.IsZero() {
		addFact("Since", fmt.Sprintf("<!date^%d^{date_short_pretty} {time}|%s>", ev.StartsAt.Unix(), ev.StartsAt.UTC().Format("2006-01-02 15:04 UTC")))
	}
	if len(body) == 0 {
		body = append(body, "*"+title+"*")
	}
	blocks = append(blocks, slackapi.NewSectionBlock(mrkdwn(Truncate(strings.Join(body, "\n"), MaxSectionText)), facts, nil))

	var items []string
	heading := "*Evidence* (value vs baseline)"
	if resolved(ev) {
		heading = "*Recovered* (" + notify.NowLabel(ev) + " vs peak)"
		for _, r := range notify.Recoveries(ev) {
			items = append(items, "*"+Escape(r.Name)+"*\n"+Escape(r.Value()))
		}
	} else {
		for _, f := range notify.Shown(ev.Evidence) {
			items = append(items, "*"+Escape(f.Name)+"*\n"+Escape(notify.FieldValue(f)))
		}
	}
	if len(items) > maxEvidence {
		heading += fmt.Sprintf(" — %d more truncated", len(items)-maxEvidence)
		items = items[:maxEvidence]
	}
	for i := 0; i < len(items); i += MaxFields {
		var objs []*slackapi.TextBlockObject
		for _, it := range items[i:min(i+MaxFields, len(items))] {
			objs = append(objs, mrkdwn(Truncate(it, MaxFieldText)))
		}
		var text *slackapi.TextBlockObject
		if i == 0 {
			text = mrkdwn(heading)
		}
		blocks = append(blocks, slackapi.NewSectionBlock(text, objs, nil))
	}
	if len(ev.Emergency) > 0 && !resolved(ev) {
		blocks = append(blocks, section(steps(":rotating_light: *Do now*", ev.Emergency)))
	}
	if len(ev.RootCause) > 0 {
		blocks = append(blocks, section(steps(":wrench: *Then fix the cause*", ev.RootCause)))
	}
	var ctx []string
	if len(ev.ExplainedBy) > 0 {
		ctx = append(ctx, "Explained by: "+Escape(strings.Join(ev.ExplainedBy, ", ")))
	}
	if len(ev.Explains) > 0 {
		ctx = append(ctx, "Explains: "+Escape(strings.Join(ev.Explains, ", ")))
	}
	if len(ctx) > 0 {
		blocks = append(blocks, slackapi.NewContextBlock("", mrkdwn(Truncate(strings.Join(ctx, " · "), MaxSectionText))))
	}
	var links []string
	if l := link(ev.RunbookURL, "Runbook"); l != "" {
		links = append(links, l)
	}
	if l := link(ev.AlertURL, "Incident"); l != "" {
		links = append(links, l)
	}
	if l := link(ev.PostmortemURL, "Postmortem draft"); l != "" {
		links = append(links, l)
	}
	links = append(links, fmt.Sprintf("%s · fingerprint `%s` · event %d", Escape(ev.Class), Escape(ev.Fingerprint), ev.Seq))
	linkBlock := slackapi.NewContextBlock("", mrkdwn(Truncate(strings.Join(links, " · "), MaxSectionText)))

	// The links come last and are never the block that is cut.
	if len(blocks) > MaxBlocks-1 {
		blocks = append(blocks[:MaxBlocks-2], section("…(further blocks truncated)"))
	}
	blocks = append(blocks, linkBlock)
	shrink(blocks)
	return blocks
}

// shrink cuts the longest texts until the message's total text fits
// MaxTotalText.
func shrink(blocks []slackapi.Block) {
	for range 500 {
		total := 0
		var longest *slackapi.TextBlockObject
		longestN := 0
		for _, b := range blocks {
			for _, t := range texts(b) {
				n := utf8.RuneCountInString(t.Text)
				total += n
				if n > longestN {
					longest, longestN = t, n
				}
			}
		}
		if total <= MaxTotalText || longest == nil || longestN <= 40 {
			return
		}
		longest.Text = Truncate(longest.Text, max(longestN-(total-MaxTotalText), longestN/2, 40))
	}
}

func texts(b slackapi.Block) []*slackapi.TextBlockObject {
	var out []*slackapi.TextBlockObject
	switch b := b.(type) {
	case *slackapi.SectionBlock:
		if b.Text != nil {
			out = append(out, b.Text)
		}
		out = append(out, b.Fields...)
	case *slackapi.HeaderBlock:
		out = append(out, b.Text)
	case *slackapi.ContextBlock:
		for _, e := range b.ContextElements.Elements {
			if t, ok := e.(*slackapi.TextBlockObject); ok {
				out = append(out, t)
			}
		}
	}
	return out
}

// ChangeText describes what changed from the last delivered event to ev,
// for the thread reply; "" when nothing a human needs to hear changed.
func ChangeText(last, ev notify.Event) string {
	if resolved(ev) {
		text := ":white_check_mark: " + Escape(notify.Title(ev))
		if l := link(ev.PostmortemURL, "Postmortem draft"); l != "" {
			// The link goes last so truncation never cuts it.
			return Truncate(text, MaxSectionText-len(l)-1) + "\n" + l
		}
		return Truncate(text, MaxSectionText)
	}
	if ev.Kind == notify.KindRepeat {
		return Truncate(fmt.Sprintf(":repeat: Still firing after %s: %s", notify.FormatDuration(notify.Lasted(ev)), Escape(notify.Headline(ev))), MaxSectionText)
	}
	var parts []string
	if last.Fingerprint != "" && last.Severity != ev.Severity {
		verb := "Escalated"
		if ev.Severity < last.Severity {
			verb = "De-escalated"
		}
		parts = append(parts, fmt.Sprintf("*%s* %s → %s", verb, last.Severity, ev.Severity))
	}
	if ev.Failing != "" && ev.Failing != last.Failing {
		parts = append(parts, "*Users failing:* "+Escape(ev.Failing))
	}
	if ev.Draining && !last.Draining {
		parts = append(parts, "*Cause cleared*, what it caused is still here: "+Escape(ev.Summary))
	}
	// A class change is the cause found after its consequence paged: the
	// reply says so, and the former class is no new member.
	renamed := last.Fingerprint != "" && last.Class != "" && last.Class != ev.Class
	if renamed {
		parts = append(parts, "*Cause identified:* "+Escape(ev.Class)+"; the incident is named after it")
	}
	var joined []string
	for _, c := range ev.Explains {
		if !slices.Contains(last.Explains, c) && !(renamed && c == last.Class) {
			joined = append(joined, c)
		}
	}
	if last.Fingerprint != "" && len(joined) > 0 {
		parts = append(parts, "*Now also:* "+Escape(strings.Join(joined, ", ")))
	}
	if strings.Join(last.ExplainedBy, ",") != strings.Join(ev.ExplainedBy, ",") {
		if len(ev.ExplainedBy) == 0 {
			parts = append(parts, "No longer explained by another incident")
		} else {
			parts = append(parts, "Now explained by: "+Escape(strings.Join(ev.ExplainedBy, ", ")))
		}
	}
	var added []string
	seen := map[string]bool{}
	for _, f := range last.Evidence {
		seen[f.Name] = true
	}
	for _, f := range notify.Shown(ev.Evidence) {
		if !seen[f.Name] {
			added = append(added, Escape(notify.FormatField(f)))
		}
	}
	if len(added) > 0 {
		parts = append(parts, "New evidence: "+strings.Join(added, "; "))
	}
	if last.Diagnosis != "" && last.Diagnosis != ev.Diagnosis {
		parts = append(parts, "Diagnosis now: "+Escape(ev.Diagnosis))
	}
	if len(parts) == 0 {
		return ""
	}
	return Truncate(":arrows_counterclockwise: "+strings.Join(parts, "\n"), MaxSectionText)
}
