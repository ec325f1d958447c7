package recording

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

var t0 = time.Unix(1_800_000_000, 123)

func sample(name string, v float64, labels ...string) series.Sample {
	s := series.Sample{Name: name, Value: v}
	for i := 0; i+1 < len(labels); i += 2 {
		s.Labels = append(s.Labels, series.Label{Name: labels[i], Value: labels[i+1]})
	}
	return s
}

// entries is a run with what a recording must carry exactly: values that
// change and that stay, NaN, ±Inf and -0, a series that appears and one
// that goes away, two workers behind one target, a failed scrape, an
// empty one, pod status, a removed target and the rounds between them.
func entries() []Entry {
	pod := &series.Pod{Namespace: "ns", Name: "p-0", Phase: "Running", Ready: true, Restarts: 2,
		Created: t0.Add(-time.Hour).UTC(), LastTermination: series.Termination{Reason: "OOMKilled", ExitCode: 137, Finished: t0.Add(-time.Minute).UTC()}}
	scrape := func(at time.Duration, target string, groups ...series.Group) Entry {
		return Entry{Scrape: &series.Scrape{Target: target, Kind: "engine", At: t0.Add(at), Duration: 3 * time.Millisecond, Groups: groups}}
	}
	g := func(worker string, ss ...series.Sample) series.Group {
		return series.Group{Worker: worker, Model: "m", EngineType: "unified", Samples: ss}
	}
	first := scrape(0, "a", g("", sample(series.NumQueueReqs, 3, "model_name", "m"), sample(series.TTFTSeconds+"_bucket", 7, "le", "+Inf")))
	first.Scrape.Labels = map[string]string{"role": "decode"}
	first.Scrape.Pod = pod
	return []Entry{
		first,
		scrape(time.Millisecond, "gw", g("10.0.0.1:8000", sample(series.NumRunningReqs, 1)), g("10.0.0.2:8000", sample(series.NumRunningReqs, 1))),
		{Evaluate: t0.Add(time.Second)},
		scrape(time.Second, "a", g("", sample(series.NumQueueReqs, 3, "model_name", "m"), sample(series.TTFTSeconds+"_bucket", math.NaN(), "le", "+Inf"))),
		scrape(time.Second+time.Millisecond, "gw", g("10.0.0.1:8000", sample(series.NumRunningReqs, math.Inf(1))), g("10.0.0.2:8000", sample(series.NumRunningReqs, math.Inf(-1)))),
		{Evaluate: t0.Add(2 * time.Second)},
		{Scrape: &series.Scrape{Target: "a", Kind: "engine", At: t0.Add(2 * time.Second), Duration: time.Second, Reason: series.FailureHTTPStatus, Status: 503, Error: "503 Service Unavailable"}},
		scrape(2*time.Second, "gw", g("10.0.0.1:8000", sample(series.NumRunningReqs, math.Copysign(0, -1)), sample(series.NumQueueReqs, 0)), g("10.0.0.2:8000")),
		{Scrape: &series.Scrape{Target: "empty", Kind: "gateway", At: t0.Add(2 * time.Second), Groups: []series.Group{}}},
		// The same series twice in one scrape (the window rejects it; the
		// recording still carries both values).
		scrape(2*time.Second, "dup", g("", sample(series.NumQueueReqs, 1), sample(series.NumQueueReqs, 2))),
		{Evaluate: t0.Add(3 * time.Second)},
		scrape(3*time.Second, "a", g("", sample(series.NumQueueReqs, 4, "model_name", "m"))),
		// Whole numbers written as deltas: a counter growing, reset to 0,
		// a whole number turning fractional and back, and one too large
		// for an exact difference.
		scrape(4*time.Second, "c", g("", sample(series.NumRequestsTotal, 1e6), sample(series.GenThroughput, 3), sample(series.PromptTokensTotal, 1<<60))),
		scrape(5*time.Second, "c", g("", sample(series.NumRequestsTotal, 1e6+17), sample(series.GenThroughput, 3.25), sample(series.PromptTokensTotal, 1<<60+1<<10))),
		scrape(6*time.Second, "c", g("", sample(series.NumRequestsTotal, 0), sample(series.GenThroughput, 4), sample(series.PromptTokensTotal, 5))),
		scrape(7*time.Second, "c", g("", sample(series.NumRequestsTotal, 9), sample(series.GenThroughput, -2), sample(series.PromptTokensTotal, 1<<60))),
		{Removed: "gw"},
		{Evaluate: t0.Add(4 * time.Second)},
	}
}

func write(t *testing.T, es []Entry) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := NewWriter(&b, Header{Recorder: "test", Started: t0.UTC(), Settings: "scrape:\n  interval: 1s\n"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		switch {
		case e.Scrape != nil:
			w.Scrape(*e.Scrape)
		case e.Removed != "":
			w.Remove(e.Removed)
		default:
			w.Evaluate(e.Evaluate)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func readAll(r io.Reader) (Header, []Entry, error) {
	rd, err := NewReader(r)
	if err != nil {
		return Header{}, nil, err
	}
	var out []Entry
	for {
		e, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rd.Header(), out, nil
		}
		if err != nil {
			return rd.Header(), out, err
		}
		out = append(out, e)
	}
}

func TestRoundTrip(t *testing.T) {
	want := entries()
	h, got, err := readAll(bytes.NewReader(write(t, want)))
	if err != nil {
		t.Fatal(err)
	}
	if h.Format != Format || h.Version != Version || h.Recorder != "test" || !h.Started.Equal(t0) || h.Settings != "scrape:\n  interval: 1s\n" {
		t.Errorf("header %+v", h)
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameEntry(got[i], want[i]) {
			t.Errorf("entry %d:\n got %s\nwant %s", i, describe(got[i]), describe(want[i]))
		}
	}
}

// sameEntry compares exactly: times as instants, floats by their bits
// (NaN equals NaN, -0 differs from 0), label sets by value.
func sameEntry(a, b Entry) bool {
	if a.Removed != b.Removed || !a.Evaluate.Equal(b.Evaluate) || (a.Scrape == nil) != (b.Scrape == nil) {
		return false
	}
	if a.Scrape == nil {
		return true
	}
	x, y := *a.Scrape, *b.Scrape
	if x.Target != y.Target || x.Kind != y.Kind || !x.At.Equal(y.At) || x.Duration != y.Duration || x.Reason != y.Reason ||
		x.Status != y.Status || x.Error != y.Error || !reflect.DeepEqual(x.Labels, y.Labels) || !reflect.DeepEqual(x.Pod, y.Pod) ||
		(x.Groups == nil) != (y.Groups == nil) || len(x.Groups) != len(y.Groups) {
		return false
	}
	for i := range x.Groups {
		g, h := x.Groups[i], y.Groups[i]
		if g.Worker != h.Worker || g.Model != h.Model || g.EngineType != h.EngineType || len(g.Samples) != len(h.Samples) {
			return false
		}
		for j := range g.Samples {
			s, u := g.Samples[j], h.Samples[j]
			if s.Key() != u.Key() || math.Float64bits(s.Value) != math.Float64bits(u.Value) {
				return false
			}
		}
	}
	return true
}

func describe(e Entry) string {
	if e.Scrape == nil {
		return "remove " + e.Removed + " / evaluate " + e.Evaluate.String()
	}
	var b strings.Builder
	b.WriteString(e.Scrape.Target + " " + e.Scrape.At.String() + " " + string(e.Scrape.Reason))
	for _, g := range e.Scrape.Groups {
		b.WriteString(" [" + g.Worker)
		for _, s := range g.Samples {
			fmt.Fprintf(&b, " %s=%v(%x)", s.Key(), s.Value, math.Float64bits(s.Value))
		}
		b.WriteString("]")
	}
	return b.String()
}

// Only changed values are written: a scrape whose values and series are
// those of the target's previous one costs a few bytes, not a copy.
func TestUnchangedValuesAreNotWritten(t *testing.T) {
	var samples []series.Sample
	for i := range 200 {
		samples = append(samples, sample(series.TTFTSeconds+"_bucket", float64(i), "le", fmt.Sprint(i)))
	}
	var es []Entry
	for i := range 100 {
		es = append(es, Entry{Scrape: &series.Scrape{Target: "a", Kind: "engine", At: t0.Add(time.Duration(i) * time.Second),
			Groups: []series.Group{{Samples: samples}}}})
	}
	var raw bytes.Buffer
	zr, err := gzip.NewReader(bytes.NewReader(write(t, es)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(&raw, zr); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(raw.String()), "\n")
	last := lines[len(lines)-1]
	if strings.Contains(last, `"values"`) || strings.Contains(last, `"series"`) {
		t.Errorf("an unchanged scrape carries its values or series again: %s", last)
	}
	if _, got, err := readAll(bytes.NewReader(write(t, es))); err != nil || !sameEntry(got[len(got)-1], es[len(es)-1]) {
		t.Errorf("the last unchanged scrape reads back as %v (err %v)", describe(got[len(got)-1]), err)
	}
}

func TestOtherVersionIsRejected(t *testing.T) {
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	io.WriteString(gz, `{"format":"sglang-watchdog-recording","version":2}`+"\n")
	gz.Close()
	_, err := NewReader(&b)
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "the file is version 2, this watchdog reads version 1") {
		t.Errorf("error %v, want ErrVersion naming both versions", err)
	}
}

func TestBrokenFilesAreClearErrors(t *testing.T) {
	good := write(t, entries())
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0xff
	plain := func(s string) []byte {
		var b bytes.Buffer
		gz := gzip.NewWriter(&b)
		io.WriteString(gz, s)
		gz.Close()
		return b.Bytes()
	}
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty file", nil, "not a recording (no gzip stream)"},
		{"not gzip", []byte("hello"), "not a recording (no gzip stream)"},
		{"truncated", good[:len(good)*2/3], "truncated or corrupt recording"},
		{"trailer cut", good[:len(good)-4], "truncated or corrupt recording"},
		{"a flipped byte", flipped, "corrupt"},
		{"no header", plain(""), "empty recording: no header"},
		{"another format", plain(`{"format":"prometheus"}` + "\n"), `not a recording (format "prometheus"`},
		{"header not JSON", plain("{oops\n"), "line 1: header"},
		{"entry not JSON", plain(`{"format":"sglang-watchdog-recording","version":1}` + "\n{oops\n"), "line 2: corrupt entry"},
		{"empty entry", plain(`{"format":"sglang-watchdog-recording","version":1}` + "\n{}\n"), "line 2: corrupt entry: none of"},
		{"undefined series", plain(`{"format":"sglang-watchdog-recording","version":1}` + "\n" +
			`{"scrape":{"target":"a","at":1,"groups":[{"series":[5],"values":[[5,1]]}]}}` + "\n"), "line 2: corrupt entry: value of undefined series 5"},
		{"bad value", plain(`{"format":"sglang-watchdog-recording","version":1}` + "\n" + `{"series":{"id":1,"name":"x"}}` + "\n" +
			`{"scrape":{"target":"a","at":1,"groups":[{"series":[1],"values":[[1,"many"]]}]}}` + "\n"), "line 3: corrupt entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readAll(bytes.NewReader(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// failingWriter fails every write after the first n bytes.
type failingWriter struct{ n int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n < len(p) {
		return 0, errors.New("no space left on device")
	}
	f.n -= len(p)
	return len(p), nil
}

type storeFunc func(series.Scrape) error

func (f storeFunc) Append(sc series.Scrape) error { return f(sc) }

// A recording that cannot be written says so with every append (the
// scraper logs it) and at Close, and the store still gets every scrape.
func TestWriteFailureIsReportedAndTheStoreKeepsGettingScrapes(t *testing.T) {
	w, err := NewWriter(&failingWriter{n: 100}, Header{})
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	tap := w.Tap(storeFunc(func(series.Scrape) error { stored++; return nil }))
	var last error
	for i := range 20000 { // past the writer's buffers
		s := sample(series.NumQueueReqs, math.Sin(float64(i))) // incompressible
		last = tap.Append(series.Scrape{Target: "a", At: t0.Add(time.Duration(i) * time.Second), Groups: []series.Group{{Samples: []series.Sample{s}}}})
	}
	if stored != 20000 {
		t.Errorf("the store got %d of 20000 scrapes", stored)
	}
	if last == nil || !strings.Contains(last.Error(), "recording stopped: ") || !strings.Contains(last.Error(), "no space left on device") {
		t.Errorf("append error %v, want the recording's write failure", last)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("Close: %v, want the write failure", err)
	}
}
