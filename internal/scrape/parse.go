package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// RawSample is one sample as the exposition spells it, before normalization:
// the exposed name (histograms already flattened into _bucket/_sum/_count),
// the labels in exposition order and the value.
type RawSample struct {
	Name   string
	Labels []series.Label
	Value  float64
}

// Parser turns one exposition body into raw samples, appending them to dst.
// It is the only place that knows the wire format. The returned samples, and
// their Labels, may alias the parser's buffers and caches: they are
// read-only, and valid only until the next call; a Parser is not safe for
// concurrent use.
type Parser interface {
	Parse(dst []RawSample, body []byte) ([]RawSample, error)
}

// NewParser returns the default Parser: Prometheus' model/textparse, keeping
// every family.
func NewParser() Parser { return newTextParser(nil) }

// maxInterned bounds the per-parser string table. A replica repeats the same
// few hundred names and label values every scrape; a table this full means
// something generates values (a request id in a label), and then it is
// cleared rather than grown.
const maxInterned = 16384

// maxSplits bounds the per-parser cache of split series. A fleet of
// replicas of a few models exposes a few thousand distinct series texts
// (each replica's own are its pid-labelled gauges); past the bound new
// texts are split every time instead of cached, until the next Parse
// clears the cache.
const maxSplits = 16384

// textParser is the Parser over Prometheus' model/textparse, the text-format
// lexer Prometheus itself scrapes with. A keeping parser hands textparse only
// the lines it has to read (keptLines); textparse validates each; this type
// then takes the name from the series bytes and asks keep before any label
// is built, for the lines keptLines could not name. The labels of a
// kept sample are split from the same validated bytes (not through
// textparse's Labels, which copies the line and builds a labels.Labels per
// sample) and interned, so a steady-state scrape allocates almost nothing.
// FuzzParse checks the split against textparse's own Labels.
//
// A replica sends the same series texts every scrape, and the replicas of
// one model mostly the same ones, so the split of a series is cached under
// its text, as Prometheus' scrape cache keys series by theirs. A keeping
// parser reads a body whose every line to read it read before from that
// cache alone (known): a sample then costs finding its value from the
// line's end, comparing its text with the one at its position in the last
// body (a map lookup when that is another) and strconv.ParseFloat, and
// textparse lexes only bodies with a line it has not seen.
type textParser struct {
	keep    *keepFilter // nil keeps every family
	symbols *labels.SymbolTable
	strs    map[string]string
	splits  map[string]split  // series text (name and label part) -> its split
	bounds  map[string]string // exposed le/quantile text -> canonical
	labels  []series.Label    // arena the returned RawSample.Labels point into
	scratch []byte            // unescaped label value
	family  []byte            // the family of the last TYPE line
	ftype   model.MetricType
	kept    []byte // the lines of the body textparse reads (keptLines)
	// fromCache: the last Parse read the body from the caches alone
	// (known), without textparse.
	fromCache bool
	// order is the splits of the kept samples known read last, in the
	// body's order. The next body, of this replica or another of the same
	// model, mostly holds the same texts in the same order: a sample is
	// first compared with the split at its position, and the map hashed
	// into only when that is another.
	order []split
}

// split is what a series text parses to under one TYPE line (a
// histogram's le or a summary's quantile is rendered canonically, a
// gauge's is kept as written). A dropped series caches only drop.
type split struct {
	text   string // the series text, the cache's key
	family string // the TYPE line's family, interned
	ftype  model.MetricType
	drop   bool
	name   string
	labels []series.Label // owned by the cache, never appended to
}

func newTextParser(keep *keepFilter) *textParser {
	return &textParser{keep: keep, symbols: labels.NewSymbolTable(), strs: make(map[string]string, 512), splits: make(map[string]split, 512), bounds: make(map[string]string, 64)}
}

// Parse implements Parser.
func (p *textParser) Parse(dst []RawSample, body []byte) ([]RawSample, error) {
	p.fromCache = false
	if len(p.strs) > maxInterned {
		clear(p.strs)
	}
	if len(p.bounds) > maxInterned {
		clear(p.bounds)
	}
	if len(p.splits) >= maxSplits {
		clear(p.splits)
	}
	if err := nulError(body); err != nil {
		return dst, err
	}
	if p.keep != nil {
		if out, ok := p.known(dst, body); ok {
			p.fromCache = true
			return out, nil
		}
	}
	return p.parseRead(dst, body)
}

// nulError refuses a body with a NUL byte: textparse's lexer reads one as
// the end of input and would return a silently truncated scrape; the text
// format has none.
func nulError(body []byte) error {
	if i := bytes.IndexByte(body, 0); i >= 0 {
		return fmt.Errorf("line %d: NUL byte in the exposition", bytes.Count(body[:i], []byte{'\n'})+1)
	}
	return nil
}

// parseRead parses body with textparse: the lines keptLines keeps, for a
// keeping parser, else all.
func (p *textParser) parseRead(dst []RawSample, body []byte) ([]RawSample, error) {
	if p.keep != nil {
		p.kept = p.keptLines(p.kept[:0], body)
		out, err := p.parse(dst, p.kept)
		if cap(p.kept) > maxKeptBuffer {
			p.kept = nil // what one outsized body grew; nothing returned points into it
		}
		if err == nil {
			return out, nil
		}
		// The error is read again from the whole body, so that its line
		// number is the body's.
	}
	return p.parse(dst, body)
}

// maxKeptBuffer is the largest keptLines buffer kept between scrapes.
const maxKeptBuffer = 4 << 20

// keptLines appends to out the lines of body textparse has to read: all
// but the HELP lines and the samples whose name is a valid metric name
// that keep drops. Lexing is most of a parse, and dropped families and
// help texts are 42% of the bytes of the current SGLang capture. A line
// whose name is not plainly valid (quoted, blank-led, an HTML tag) is kept
// for textparse to judge.
func (p *textParser) keptLines(out, body []byte) []byte {
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i+1], body[i+1:]
		} else {
			body = nil
		}
		if bytes.HasPrefix(line, helpPrefix) {
			continue
		}
		if name := plainName(line); name != nil && !p.keep.keeps(name) {
			continue
		}
		out = append(out, line...)
	}
	return out
}

var helpPrefix = []byte("# HELP ")

// metricNameLen is the length of the metric name the line starts with
// ([a-zA-Z_:][a-zA-Z0-9_:]*), 0 if it starts with none.
func metricNameLen(line []byte) int {
	for i, c := range line {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c == ':':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return i
		}
	}
	return len(line)
}

// plainName is the metric name a sample line starts with, when it is
// plainly one (unquoted, followed by '{' or a blank); nil otherwise, for
// textparse to judge.
func plainName(line []byte) []byte {
	n := metricNameLen(line)
	if n == 0 || n >= len(line) || !isNameEnd(line[n]) {
		return nil
	}
	return line[:n]
}

// isNameEnd reports whether c may follow a sample's metric name.
func isNameEnd(c byte) bool { return c == '{' || c == ' ' || c == '\t' }

// parse runs textparse over body.
func (p *textParser) parse(dst []RawSample, body []byte) ([]RawSample, error) {
	p.labels = p.labels[:0]
	p.family, p.ftype = p.family[:0], model.MetricTypeUnknown
	tp := textparse.NewPromParser(body, p.symbols, false)
	for entries := 0; ; entries++ {
		entry, err := tp.Next()
		if errors.Is(err, io.EOF) {
			return dst, nil
		}
		if err != nil {
			return dst, fmt.Errorf("line %d: %w", failedLine(body, entries), err)
		}
		switch entry {
		case textparse.EntryType:
			name, t := tp.Type()
			p.family, p.ftype = append(p.family[:0], name...), t
		case textparse.EntrySeries:
			var err error
			if dst, err = p.appendSeries(dst, tp); err != nil {
				return dst, err
			}
		}
	}
}

func (p *textParser) appendSeries(dst []RawSample, tp textparse.Parser) ([]RawSample, error) {
	raw, _, v := tp.Series()
	if c, ok := p.splits[string(raw)]; ok && c.ftype == p.ftype && c.family == string(p.family) {
		if c.drop {
			return dst, nil
		}
		return append(dst, RawSample{Name: c.name, Labels: c.labels, Value: v}), nil
	}
	name, rest := splitName(raw)
	if name == nil {
		// The name is quoted inside the braces ({"a.b",x="y"}): rare
		// enough to take textparse's own, allocating, path.
		var ls labels.Labels
		tp.Labels(&ls)
		name = []byte(ls.Get(model.MetricNameLabel))
	}
	if p.keep != nil && !p.keep.keeps(name) {
		p.cache(raw, split{drop: true})
		return dst, nil
	}
	bound := p.boundLabel(name)
	start := len(p.labels)
	if err := p.splitLabels(rest, bound); err != nil {
		return dst, fmt.Errorf("%w while parsing %q", err, raw)
	}
	s := RawSample{Name: p.intern(name), Labels: p.labels[start:len(p.labels):len(p.labels)], Value: v}
	p.cache(raw, split{name: s.Name, labels: slices.Clip(slices.Clone(s.Labels))})
	return append(dst, s), nil
}

// cache keeps the split of the series text raw under the current TYPE
// line, while the cache has room.
func (p *textParser) cache(raw []byte, c split) {
	if len(p.splits) >= maxSplits {
		return
	}
	c.family, c.ftype = p.intern(p.family), p.ftype
	c.text = string(raw)
	p.splits[c.text] = c
}

// failedLine is the line number of the entry after the first entries ones:
// textparse consumes one line per entry and skips blank ones, and does not
// report positions itself.
func failedLine(body []byte, entries int) int {
	line := 0
	for len(body) > 0 {
		line++
		var l []byte
		l, body, _ = bytes.Cut(body, []byte{'\n'})
		if len(bytes.Trim(l, " \t")) == 0 {
			continue
		}
		if entries == 0 {
			return line
		}
		entries--
	}
	return line + 1
}

// splitName returns the metric name and the label part ("{...}" or empty)
// of a series as textparse validated it; a nil name means the name is quoted
// inside the braces.
func splitName(s []byte) (name, rest []byte) {
	if len(s) > 0 && s[0] == '{' {
		return nil, s
	}
	i := bytes.IndexByte(s, '{')
	if i < 0 {
		return bytes.TrimRight(s, " \t"), nil
	}
	name = bytes.TrimRight(s[:i], " \t")
	if len(name) > 1 && name[0] == '"' {
		name = name[1 : len(name)-1] // {"quoted"} form outside braces
	}
	return name, s[i:]
}

// boundLabel is the label whose value is a float to render canonically for
// this sample: le on a histogram's buckets, quantile on a summary's
// quantiles (as textparse and expfmt both do), "" otherwise. A gauge
// carrying le (SGLang's gt/le gauge-histograms) keeps its text.
func (p *textParser) boundLabel(name []byte) string {
	fam, ok := bytes.CutPrefix(name, p.family)
	if !ok {
		return ""
	}
	switch {
	case p.ftype == model.MetricTypeHistogram && string(fam) == "_bucket":
		return model.BucketLabel
	case p.ftype == model.MetricTypeSummary && len(fam) == 0:
		return model.QuantileLabel
	}
	return ""
}

// splitLabels appends the label pairs of s ("{a="1",b="2"}", as textparse
// validated it: optional blanks between tokens, quoted names, a trailing
// comma) to p.labels.
func (p *textParser) splitLabels(s []byte, bound string) error {
	if len(s) == 0 {
		return nil
	}
	i := 1 // past '{'
	for {
		i = skipBlanks(s, i)
		if i >= len(s) {
			return errors.New("unterminated label set")
		}
		if s[i] == '}' {
			return nil
		}
		var lname string
		if s[i] == '"' {
			v, n, err := p.quoted(s, i)
			if err != nil {
				return err
			}
			i = skipBlanks(s, n)
			if i < len(s) && (s[i] == ',' || s[i] == '}') {
				// A quoted metric name inside the braces, not a label.
				if s[i] == ',' {
					i++
				}
				continue
			}
			lname = v
		} else {
			j := i
			for j < len(s) && s[j] != '=' && s[j] != ' ' && s[j] != '\t' {
				j++
			}
			lname = p.intern(s[i:j])
			i = j
		}
		i = skipBlanks(s, i)
		if i >= len(s) || s[i] != '=' {
			return fmt.Errorf("expected '=' after label %q", lname)
		}
		i = skipBlanks(s, i+1)
		value, n, err := p.quoted(s, i)
		if err != nil {
			return err
		}
		if lname == bound {
			value = p.bound(value)
		}
		p.labels = append(p.labels, series.Label{Name: lname, Value: value})
		i = skipBlanks(s, n)
		if i < len(s) && s[i] == ',' {
			i++
		}
	}
}

func skipBlanks(s []byte, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}

// quoted reads the quoted string at s[i] and returns it unescaped and
// interned, and the index after its closing quote.
func (p *textParser) quoted(s []byte, i int) (string, int, error) {
	if i >= len(s) || s[i] != '"' {
		return "", i, errors.New("expected a quoted label value")
	}
	j := i + 1
	escaped := false
	for ; j < len(s) && s[j] != '"'; j++ {
		if s[j] == '\\' {
			escaped = true
			j++
		}
	}
	if j >= len(s) {
		return "", j, errors.New("unterminated quoted string")
	}
	v := s[i+1 : j]
	if escaped {
		v = p.unescape(v)
	}
	return p.intern(v), j + 1, nil
}

// unescape resolves the text format's three escapes (\\, \", \n) into the
// scratch buffer; any other backslash stays, as textparse keeps it.
func (p *textParser) unescape(v []byte) []byte {
	b := p.scratch[:0]
	for k := 0; k < len(v); k++ {
		if v[k] == '\\' && k+1 < len(v) {
			switch v[k+1] {
			case '\\', '"':
				b = append(b, v[k+1])
				k++
				continue
			case 'n':
				b = append(b, '\n')
				k++
				continue
			}
		}
		b = append(b, v[k])
	}
	p.scratch = b
	return b
}

// intern returns b as a string shared with every earlier scrape that held
// the same bytes; a map lookup keyed by string(b) does not allocate.
func (p *textParser) intern(b []byte) string {
	if s, ok := p.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	p.strs[s] = s
	return s
}

// bound renders a bucket bound or quantile canonically, so "1", "1.0" and
// "1e0" are one series; the rendering is cached under the exposed text.
func (p *textParser) bound(text string) string {
	if s, ok := p.bounds[text]; ok {
		return s
	}
	s := text
	if f, err := strconv.ParseFloat(text, 64); err == nil {
		s = formatBound(f)
	}
	p.bounds[text] = s
	return s
}

// formatBound renders a float the way the exposition wrote it: shortest
// round-trip digits, Go-style exponent for large and tiny values, and a ".0"
// on integral values. That is byte-for-byte what Python's prometheus_client
// (every SGLang version) prints, and also Prometheus 3's normalized le, so
// a series keeps one identity across scrapes and tools.
func formatBound(f float64) string {
	switch {
	case math.IsInf(f, +1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return s
}
