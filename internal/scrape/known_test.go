package scrape

import (
	"strings"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/internal/fixture"
)

// sampleLines renders raw samples in the order returned, labels as
// returned, values bit-exact: two parses compare sample for sample.
func sampleLines(raw []RawSample) []string {
	out := make([]string, 0, len(raw))
	for _, rs := range raw {
		out = append(out, sampleLine(rs.Name, rs.Labels, rs.Value))
	}
	return out
}

// parseOutcome is what a parse returns, rendered to compare.
func parseOutcome(p *textParser, body []byte) (lines []string, err string) {
	raw, e := p.Parse(nil, body)
	if e != nil {
		return nil, e.Error()
	}
	return sampleLines(raw), ""
}

// sameAsFresh parses body with p and with a fresh keeping parser through
// textparse, and fails unless both return the same samples in the same
// order, or the same error.
func sameAsFresh(t *testing.T, p *textParser, body []byte) {
	t.Helper()
	var wantLines []string
	var wantErr string
	if err := nulError(body); err != nil {
		wantErr = err.Error()
	} else if raw, err := newTextParser(newKeepSet(fuzzKeep).filter()).parseRead(nil, body); err != nil {
		wantErr = err.Error()
	} else {
		wantLines = sampleLines(raw)
	}
	gotLines, gotErr := parseOutcome(p, body)
	if gotErr != wantErr {
		t.Fatalf("error %q, through textparse %q (read from the cache: %v)", gotErr, wantErr, p.fromCache)
	}
	if strings.Join(gotLines, "\n") != strings.Join(wantLines, "\n") {
		t.Fatalf("read from the cache: %v; samples\n%s\nthrough textparse\n%s", p.fromCache,
			strings.Join(gotLines, "\n"), strings.Join(wantLines, "\n"))
	}
}

// A keeping parser that saw a replica's exposition reads the next scrape of
// it from its caches, without textparse, and returns what textparse's path
// returns: for bodies it can read so (values moved, comments, no final
// newline, blanks) and, through textparse, for those it cannot (a new
// series, a timestamp, the same text under another TYPE line, odd forms,
// broken lines, which fail at the same line with the same error).
func TestKnownBodiesReadAsTextparseReadsThem(t *testing.T) {
	const typ = "# HELP sglang:num_running_reqs Running.\n# TYPE sglang:num_running_reqs gauge\n"
	const run = `sglang:num_running_reqs{model_name="m",tp_rank="0"}`
	const hist = "# TYPE sglang:time_to_first_token_seconds histogram\n" +
		`sglang:time_to_first_token_seconds_bucket{le="0.50",model_name="m"} 3` + "\n" +
		`sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 4` + "\n" +
		`sglang:time_to_first_token_seconds_sum{model_name="m"} 1.5` + "\n" +
		`sglang:time_to_first_token_seconds_count{model_name="m"} 4` + "\n"
	// A family no reader keeps, whose lines are skipped unread.
	const dropped = "# TYPE sglang:func_latency_seconds gauge\nsglang:func_latency_seconds 1\n"
	base := typ + run + " 3\n" + hist + dropped

	for _, tc := range []struct {
		name      string
		body      string
		fromCache bool
	}{
		{"the same body", base, true},
		{"values moved", typ + run + " 7\n" + strings.ReplaceAll(hist, "} 4\n", "} 9\n") + dropped, true},
		{"NaN", typ + run + " NaN\n" + hist, true},
		{"signed infinities and exponents", typ + run + " -Inf\n" + strings.Replace(hist, " 1.5\n", " +Inf\n", 1) + typ + run + " 1e-3\n", true},
		{"negative zero", typ + run + " -0\n", true},
		{"blanks and tabs around the value", typ + run + " \t 5 \t\n", true},
		{"no final newline", typ + run + " 5", true},
		{"a comment", "# scraped by a test\n#no blank\n" + base, true},
		{"blank lines", "\n\n" + typ + "\n" + run + " 2\n\n", true},
		{"a broken line of a dropped family", typ + run + " 1\nsglang:func_latency_seconds{le=\"1\" 2\n", true},
		{"the families in another order", hist + typ + run + " 3\n", true},
		{"a dropped name that starts a kept one", "sglang:num_running 1\n" + typ + run + " 3\n", true},
		{"a NUL in a comment", "# a \x00\n" + base, false},
		{"a dropped name followed by no blank or brace", "sglang:func_latency_seconds\"x\" 1\n" + base, false},
		{"a series not seen", typ + `sglang:num_running_reqs{model_name="m",tp_rank="1"} 3` + "\n", false},
		{"a timestamp", typ + run + " 3 1700000000000\n", false},
		{"a timestamp out of range", typ + run + " 3 99999999999999999999\n", false},
		{"no blank before the value", typ + run + "3\n", false},
		{"a value with an underscore", typ + run + " 1_000\n", false},
		{"a hexadecimal value", typ + run + " 0x1p3\n", false},
		{"a value that is no number", typ + run + " two\n", false},
		{"a brace in the value", typ + run + " 3{\n", false},
		{"a carriage return", typ + run + " 3\r\n", false},
		{"the same text under another TYPE line", "# TYPE sglang:num_running_reqs counter\n" + run + " 3\n", false},
		{"a histogram's bucket as a gauge's", strings.Replace(hist, "histogram", "gauge", 1), false},
		// Under its own family's TYPE line the bound reads 0.5; under
		// another's it is no bound, and stays as written.
		{"a bucket under another histogram's TYPE line", "# TYPE sglang:other_seconds histogram\n" +
			`sglang:time_to_first_token_seconds_bucket{le="0.50",model_name="m"} 3` + "\n", false},
		{"no TYPE line", run + " 3\n", false},
		{"a TYPE line with two blanks", "# TYPE sglang:num_running_reqs  gauge\n" + run + " 3\n", false},
		{"a TYPE line with an unknown type", "# TYPE sglang:num_running_reqs gaugee\n" + run + " 3\n", false},
		{"a TYPE line led by a tab", "#\tTYPE sglang:num_running_reqs gauge\n" + run + " 3\n", false},
		{"a broken HELP line led by a tab", "#\tHELP 3bad text\n" + base, false},
		{"a comment that starts like a HELP line", "# HELPS nothing\n" + base, false},
		{"a broken kept line after known ones", base + run + " 3 x\n", false},
		{"a line led by a blank", typ + " " + run + " 3\n", false},
		{"an unterminated label set", typ + `sglang:num_running_reqs{model_name="m"` + " 3\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTextParser(newKeepSet(fuzzKeep).filter())
			for i, want := range []bool{false, true} {
				if _, err := p.Parse(nil, []byte(base)); err != nil || p.fromCache != want {
					t.Fatalf("parse %d of the base: error %v, read from the cache %v", i, err, p.fromCache)
				}
			}
			sameAsFresh(t, p, []byte(tc.body))
			if p.fromCache != tc.fromCache {
				t.Errorf("read from the cache: %v, want %v", p.fromCache, tc.fromCache)
			}
			// Whatever textparse read is cached now, and reads the same.
			sameAsFresh(t, p, []byte(tc.body))
		})
	}
}

// Every captured release is read from the cache at its second scrape, and
// as textparse reads it.
func TestKnownReadsEveryFixture(t *testing.T) {
	for _, name := range fixture.Names() {
		body, err := fixture.SGLang(name)
		if err != nil {
			t.Fatal(err)
		}
		p := newTextParser(newKeepSet(fuzzKeep).filter())
		if _, err := p.Parse(nil, body); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		sameAsFresh(t, p, body)
		if !p.fromCache {
			t.Errorf("%s: the second scrape was not read from the cache", name)
		}
	}
}

// splitValue takes the last token of a line as its value, and the text
// before it, blanks trimmed, as the candidate series text.
func TestSplitValue(t *testing.T) {
	for _, tc := range []struct {
		line, text string
		v          float64
		ok         bool
	}{
		{line: `a{b="c d"} 1.5`, text: `a{b="c d"}`, v: 1.5, ok: true},
		{line: "a \t-2 \t", text: "a", v: -2, ok: true},
		{line: "a 1 2", text: "a 1", v: 2, ok: true}, // a timestamp: no series text ends so
		{line: "5"},
		{line: "a "},
		{line: "a 1_0"},
		{line: "a 0x1p1"},
		{line: "a 1{"},
	} {
		text, v, ok := splitValue([]byte(tc.line))
		if ok != tc.ok || string(text) != tc.text || v != tc.v {
			t.Errorf("splitValue(%q) = %q, %v, %v; want %q, %v, %v", tc.line, text, v, ok, tc.text, tc.v, tc.ok)
		}
	}
}
