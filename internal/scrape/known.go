package scrape

import (
	"bytes"
	"strconv"
	"unsafe"

	"github.com/prometheus/common/model"
)

// known parses body from the keeping parser's caches alone, without
// textparse, when every line textparse would read is one it read before:
// a TYPE line in its plain form, or a sample whose series text (the name
// and label set, textparse's Series bytes) was split under the same TYPE
// line and whose value follows it plainly. A replica sends the same series
// texts every scrape and only its values move, so after a parser's first
// scrape of a replica nearly every scrape is read this way; lexing was most
// of a scrape's cost.
//
// It returns false, and dst as it came, at the first line it cannot read
// so: a series text not cached, a timestamp, a TYPE line in another form,
// anything unusual. The caller then parses the body with textparse, which
// judges the line and caches what it splits. So known accepts a subset of
// what textparse accepts and returns what the textparse path would, sample
// for sample (FuzzParse and TestKnownBodiesReadAsTextparseReadsThem check
// it):
//   - A cached series text was lexed by textparse from the start of a line;
//     the same bytes at the start of another line lex the same, and a blank
//     then a value token ([^{ \t\n]+) then blanks and the line's end are
//     what textparse accepts after them.
//   - Comments other than HELP and TYPE lines are skipped, as textparse
//     skips them.
//   - The value is read by the same rule as textparse's (no p, P or _,
//     then strconv.ParseFloat, whose NaN is already the one textparse
//     makes every NaN).
//   - HELP lines and samples of families keep drops are skipped unread, as
//     keptLines skips them.
//   - The body's end ends its last line, as textparse adds the newline.
func (p *textParser) known(dst []RawSample, body []byte) ([]RawSample, bool) {
	n0 := len(dst)
	p.family, p.ftype = p.family[:0], model.MetricTypeUnknown
	// family is p.family as the cache holds it, once a kept sample under
	// the TYPE line matched it (familyRead): compared then as bytes, it
	// is compared as the cache's own string after, and the TYPE lines of
	// families keep drops are not looked up at all.
	family, familyRead := "", true
	// The keep decision of the last sample's name: a histogram's buckets
	// are a run of lines of one name.
	var lastName []byte
	lastKept := false
	k := 0 // kept samples so far: their index in p.order
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(line) == 0 {
			continue
		}
		if line[0] == '#' {
			if bytes.HasPrefix(line, helpPrefix) || isComment(line) {
				continue
			}
			if !p.knownType(line) {
				return dst[:n0], false
			}
			familyRead = false
			continue
		}
		if n := len(lastName); n == 0 || n >= len(line) || !isNameEnd(line[n]) || !bytes.Equal(line[:n], lastName) {
			name := plainName(line)
			if name == nil {
				return dst[:n0], false
			}
			lastName, lastKept = name, p.keep.keeps(name)
		}
		if !lastKept {
			continue
		}
		text, v, ok := splitValue(line)
		if !ok {
			return dst[:n0], false
		}
		var c split
		if k < len(p.order) && p.order[k].text == string(text) {
			c = p.order[k]
		} else if c, ok = p.splits[string(text)]; !ok {
			return dst[:n0], false
		}
		if !familyRead {
			if c.family != string(p.family) {
				return dst[:n0], false
			}
			family, familyRead = c.family, true
		}
		if c.ftype != p.ftype || c.family != family {
			return dst[:n0], false
		}
		if k < len(p.order) {
			p.order[k] = c
		} else {
			p.order = append(p.order, c)
		}
		k++
		if !c.drop {
			dst = append(dst, RawSample{Name: c.name, Labels: c.labels, Value: v})
		}
	}
	p.order = p.order[:k]
	return dst, true
}

var typePrefix = []byte("# TYPE ")

// isComment reports whether a line starting with '#' is a comment
// textparse reads and ignores: one whose text, after the '#' and any
// blanks, starts with neither HELP nor TYPE (with them, textparse reads
// metadata, or a comment in a few odd forms that known leaves to it).
func isComment(line []byte) bool {
	rest := bytes.TrimLeft(line[1:], " \t")
	return !bytes.HasPrefix(rest, []byte("HELP")) && !bytes.HasPrefix(rest, []byte("TYPE"))
}

// knownType reads a TYPE line of the plain form "# TYPE <name> <type>",
// one blank each, the name unquoted; false for any other form, which
// textparse then judges.
func (p *textParser) knownType(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, typePrefix)
	if !ok {
		return false
	}
	n := metricNameLen(rest)
	if n == 0 || n >= len(rest) || rest[n] != ' ' {
		return false
	}
	var t model.MetricType
	switch string(rest[n+1:]) {
	case "counter":
		t = model.MetricTypeCounter
	case "gauge":
		t = model.MetricTypeGauge
	case "histogram":
		t = model.MetricTypeHistogram
	case "summary":
		t = model.MetricTypeSummary
	case "untyped":
		t = model.MetricTypeUnknown
	default:
		return false
	}
	p.family, p.ftype = append(p.family[:0], rest[:n]...), t
	return true
}

// splitValue splits a sample line (without its newline) into the text
// before its value, blanks trimmed, and the value: the line's last token,
// read from the right, so that the label set is not scanned. False when the
// last token is no value textparse would read, or the line has no blank
// before it. The text is only a candidate: it is the series text when the
// parser has it cached (a series text ends at its name or at its label
// set's brace, so a text that also took in a timestamp's value is never
// one).
func splitValue(line []byte) (text []byte, v float64, ok bool) {
	end := len(line)
	for end > 0 && isBlank(line[end-1]) {
		end--
	}
	start := end
	for start > 0 && !isBlank(line[start-1]) {
		start--
	}
	if start == 0 || start == end {
		return nil, 0, false
	}
	// textparse's value token excludes '{' too; ParseFloat refuses it.
	tok := line[start:end]
	for _, c := range tok {
		if c == 'p' || c == 'P' || c == '_' {
			return nil, 0, false
		}
	}
	v, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(tok), len(tok)), 64)
	if err != nil {
		return nil, 0, false
	}
	for start > 0 && isBlank(line[start-1]) {
		start--
	}
	return line[:start], v, true
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }
