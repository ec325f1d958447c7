// Package recording is the file format of `watchdog record`: the stream of
// scrapes exactly as the window store received them, interleaved with the
// evaluation instants, so `watchdog backtest --recording` replays a run
// through the same window, assessment and alert code and gets the same
// events.
//
// # Format (version 1)
//
// A recording is one gzip stream of JSON lines. The first line is the
// header:
//
//	{"format":"sglang-watchdog-recording","version":1,"recorder":"v1.2.3",
//	 "started":"2026-01-02T03:04:05Z","settings":"<YAML>"}
//
// settings is opaque to this package: watchdog record stores the
// configuration sections the decisions depend on (scrape interval and
// limits, evaluation, detectors, alerts, correlation) so a replay uses the
// thresholds of the recorded run. It never holds notification settings.
//
// Every further line is one entry, in the order it happened:
//
//	{"series":{"id":7,"name":"sglang:num_queue_reqs","labels":[["model_name","m"]]}}
//	{"scrape":{"target":"sim-0","kind":"engine","at":1700000000000000000,"dur":1200000,
//	           "groups":[{"series":[1,2,7],"values":[[1,3],[7,"NaN"]]}]}}
//	{"remove":"sim-0"}
//	{"evaluate":1700000001000000000}
//
// A "series" line defines an id before its first use; ids are per target,
// worker and series key. A group's "series" lists its series in exposition
// order and is written only when that list differs from the group's
// previous scrape (same target and worker); "values" holds only the
// samples whose value changed since the series was last written, as
// [id, value] pairs, with NaN and ±Inf as the strings "NaN", "+Inf", "-Inf",
// except that a whole number following a whole number (a counter, a
// histogram bucket) is written in "deltas" as [id, new - old], which is
// exact below 2^52 and repeats from scrape to scrape, so it compresses well.
// "at" and "evaluate" are Unix nanoseconds, "dur" nanoseconds; "labels"
// (target metadata) and "pod" (series.Pod, times in RFC 3339) are written
// with every scrape that has them; "empty_groups" marks a scrape that
// exposed no replica at all. A failed scrape has "reason" (and "status",
// "error") and no groups. "remove" is a target
// leaving the scrape set; "evaluate" an evaluation round at that instant.
//
// A reader rejects another format version, and a truncated or corrupt file
// (the gzip checksum covers every byte) with the line where it broke.
package recording

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Format names the file format in the header.
const Format = "sglang-watchdog-recording"

// Version is the format version this package writes and reads.
const Version = 1

// Header is the first line of a recording.
type Header struct {
	Format   string    `json:"format"`
	Version  int       `json:"version"`
	Recorder string    `json:"recorder,omitempty"` // the watchdog version that wrote it
	Started  time.Time `json:"started"`
	// Settings is the recorder's configuration of the decisions (YAML);
	// see the package comment.
	Settings string `json:"settings,omitempty"`
}

// Entry is one recorded event: exactly one of Scrape, Removed and Evaluate
// is set.
type Entry struct {
	Scrape   *series.Scrape
	Removed  string    // a target that left the scrape set
	Evaluate time.Time // an evaluation round at this instant
}

type line struct {
	Series   *seriesDef `json:"series,omitempty"`
	Scrape   *scrapeRec `json:"scrape,omitempty"`
	Remove   string     `json:"remove,omitempty"`
	Evaluate int64      `json:"evaluate,omitempty"`
}

type seriesDef struct {
	ID     uint64      `json:"id"`
	Name   string      `json:"name"`
	Labels [][2]string `json:"labels,omitempty"`
}

type scrapeRec struct {
	Target   string               `json:"target"`
	Kind     string               `json:"kind,omitempty"`
	Labels   map[string]string    `json:"labels,omitempty"`
	Address  string               `json:"address,omitempty"`
	At       int64                `json:"at"`
	Duration int64                `json:"dur,omitempty"`
	Reason   series.ScrapeFailure `json:"reason,omitempty"`
	Status   int                  `json:"status,omitempty"`
	Error    string               `json:"error,omitempty"`
	Pod      *series.Pod          `json:"pod,omitempty"`
	Groups   []groupRec           `json:"groups,omitempty"`
	Empty    bool                 `json:"empty_groups,omitempty"` // Groups was a non-nil empty slice
}

type groupRec struct {
	Worker     string            `json:"worker,omitempty"`
	Model      string            `json:"model,omitempty"`
	EngineType string            `json:"engine_type,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"` // a GPU's identity and pod

	// Series is nil when the group's series are those of its previous
	// scrape.
	Series *[]uint64   `json:"series,omitempty"`
	Values []valuePair `json:"values,omitempty"`
	// Deltas are changes of whole-numbered values (counters, histogram
	// buckets) as [id, new - old]: exact, and they repeat from scrape to
	// scrape, which compresses far better than the growing totals.
	Deltas []valuePair `json:"deltas,omitempty"`
}

// valuePair is [id, value].
type valuePair struct {
	ID    uint64
	Value float64
}

func (p valuePair) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 32)
	b = append(b, '[')
	b = strconv.AppendUint(b, p.ID, 10)
	b = append(b, ',')
	switch {
	case math.IsNaN(p.Value):
		b = append(b, `"NaN"`...)
	case math.IsInf(p.Value, 1):
		b = append(b, `"+Inf"`...)
	case math.IsInf(p.Value, -1):
		b = append(b, `"-Inf"`...)
	default:
		b = strconv.AppendFloat(b, p.Value, 'g', -1, 64)
	}
	return append(b, ']'), nil
}

func (p *valuePair) UnmarshalJSON(data []byte) error {
	var raw [2]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw[0], &p.ID); err != nil {
		return fmt.Errorf("series id: %w", err)
	}
	s := string(raw[1])
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw[1], &s); err != nil {
			return err
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("value of series %d: %w", p.ID, err)
	}
	p.Value = v
	return nil
}

// groupKey identifies a replica's group across scrapes.
type groupKey struct{ target, worker string }

// seriesKey identifies a series of a group.
type seriesKey struct {
	group groupKey
	key   string
}

// Writer writes a recording. Its methods are safe for concurrent use; the
// entries are written in the order the calls happen.
type Writer struct {
	mu     sync.Mutex
	gz     *gzip.Writer
	buf    *bufio.Writer
	enc    *json.Encoder
	ids    map[seriesKey]uint64
	last   map[uint64]float64
	groups map[groupKey][]uint64
	err    error // the first write error; later writes are skipped
	closed bool
}

// NewWriter writes the header to w and returns the writer of the entries.
// Close flushes and ends the gzip stream; w is not closed.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Format, h.Version = Format, Version
	buf := bufio.NewWriterSize(w, 64<<10)
	gz := gzip.NewWriter(buf)
	rw := &Writer{gz: gz, buf: buf, enc: json.NewEncoder(gz), ids: map[seriesKey]uint64{}, last: map[uint64]float64{}, groups: map[groupKey][]uint64{}}
	if err := rw.enc.Encode(h); err != nil {
		return nil, fmt.Errorf("recording header: %w", err)
	}
	return rw, nil
}

// Appender is what a Tap passes scrapes on to: the window store.
type Appender interface {
	Append(sc series.Scrape) error
}

// Tap stands between the scraper and the window store: it passes every
// scrape on and records it, under the lock BeginRound holds through a
// round, so the order of scrapes and rounds in the file is the order the
// store saw them.
type Tap struct {
	w    *Writer
	next Appender
}

// Tap returns a tap recording into w in front of next.
func (w *Writer) Tap(next Appender) *Tap { return &Tap{w: w, next: next} }

// Append passes sc to the store and records it. Once a write has failed,
// the failure comes back with every append, so the scraper logs it while
// the daemon keeps watching.
func (t *Tap) Append(sc series.Scrape) error {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	err := t.next.Append(sc)
	t.w.scrapeLocked(sc)
	if t.w.err != nil {
		err = errors.Join(err, fmt.Errorf("recording stopped: %w", t.w.err))
	}
	return err
}

// Remove forgets target in the store (when it keeps per-target state) and
// records it.
func (t *Tap) Remove(target string) {
	t.w.mu.Lock()
	defer t.w.mu.Unlock()
	if r, ok := t.next.(interface{ Remove(string) }); ok {
		r.Remove(target)
	}
	t.w.removeLocked(target)
}

// BeginRound records an evaluation round at now and holds every Tap's
// appends off until end is called, so the replayed round reads exactly
// the scrapes this one read.
func (w *Writer) BeginRound(now time.Time) (end func()) {
	w.mu.Lock()
	w.evaluateLocked(now)
	return w.mu.Unlock
}

// Scrape records sc as the window receives it.
func (w *Writer) Scrape(sc series.Scrape) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scrapeLocked(sc)
}

func (w *Writer) scrapeLocked(sc series.Scrape) {
	if w.err != nil || w.closed {
		return
	}
	rec := scrapeRec{Target: sc.Target, Kind: sc.Kind, Labels: sc.Labels, Address: sc.Address, At: sc.At.UnixNano(), Duration: int64(sc.Duration),
		Reason: sc.Reason, Status: sc.Status, Error: sc.Error, Pod: sc.Pod, Empty: sc.Groups != nil && len(sc.Groups) == 0}
	for _, g := range sc.Groups {
		gk := groupKey{sc.Target, g.Worker}
		ids := make([]uint64, len(g.Samples))
		gr := groupRec{Worker: g.Worker, Model: g.Model, EngineType: g.EngineType, Labels: g.Labels}
		occurrences := make(map[string]int, len(g.Samples))
		for i, s := range g.Samples {
			key := s.Key()
			// A series repeated within one scrape is recorded as the
			// distinct samples it is, each with its own id.
			if n := occurrences[key]; n > 0 {
				occurrences[key]++
				key += "\xff" + strconv.Itoa(n)
			} else {
				occurrences[key] = 1
			}
			sk := seriesKey{gk, key}
			id, ok := w.ids[sk]
			if !ok {
				id = uint64(len(w.ids) + 1)
				w.ids[sk] = id
				def := &seriesDef{ID: id, Name: s.Name}
				for _, l := range s.Labels {
					def.Labels = append(def.Labels, [2]string{l.Name, l.Value})
				}
				w.write(line{Series: def})
			}
			ids[i] = id
			old, seen := w.last[id]
			switch {
			case seen && math.Float64bits(old) == math.Float64bits(s.Value):
			case seen && wholeNumber(old) && wholeNumber(s.Value):
				w.last[id] = s.Value
				gr.Deltas = append(gr.Deltas, valuePair{id, s.Value - old})
			default:
				w.last[id] = s.Value
				gr.Values = append(gr.Values, valuePair{id, s.Value})
			}
		}
		if prev, ok := w.groups[gk]; !ok || !slices.Equal(prev, ids) {
			w.groups[gk] = ids
			gr.Series = &ids
		}
		rec.Groups = append(rec.Groups, gr)
	}
	w.write(line{Scrape: &rec})
}

// Remove records that target left the scrape set.
func (w *Writer) Remove(target string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.removeLocked(target)
}

func (w *Writer) removeLocked(target string) {
	if w.err == nil && !w.closed {
		w.write(line{Remove: target})
	}
}

// Evaluate records an evaluation round at now.
func (w *Writer) Evaluate(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.evaluateLocked(now)
}

func (w *Writer) evaluateLocked(now time.Time) {
	if w.err == nil && !w.closed {
		w.write(line{Evaluate: now.UnixNano()})
	}
}

func (w *Writer) write(l line) {
	if err := w.enc.Encode(l); err != nil {
		w.err = err
	}
}

// Err is the first write error, nil when every entry was written.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close ends the recording (later entries are dropped) and returns the
// first error of any write.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return w.err
	}
	w.closed = true
	if err := w.gz.Close(); err != nil && w.err == nil {
		w.err = err
	}
	if err := w.buf.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	return w.err
}

// maxExact bounds the whole numbers float64 holds exactly, so old + (new
// - old) gives new back bit for bit.
const maxExact = 1 << 52

// wholeNumber reports whether v is a whole number whose differences are
// exact (-0 is not: its sign would be lost).
func wholeNumber(v float64) bool {
	return v == math.Trunc(v) && math.Abs(v) < maxExact && !(v == 0 && math.Signbit(v))
}

// Reader reads a recording.
type Reader struct {
	header Header
	br     *bufio.Reader
	buf    []byte
	line   int
	defs   map[uint64]seriesDef
	last   map[uint64]float64
	groups map[groupKey][]uint64
}

// ErrVersion is returned for a recording of another format version.
var ErrVersion = errors.New("unsupported recording version")

// maxLine bounds one line: a scrape of the largest exposition the scraper
// accepts stays far below it.
const maxLine = 256 << 20

// NewReader reads the header from r.
func NewReader(r io.Reader) (*Reader, error) {
	gz, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return nil, fmt.Errorf("not a recording (no gzip stream): %w", err)
	}
	rd := &Reader{br: bufio.NewReaderSize(gz, 64<<10), defs: map[uint64]seriesDef{}, last: map[uint64]float64{}, groups: map[groupKey][]uint64{}}
	raw, err := rd.next()
	if err == io.EOF {
		return nil, errors.New("empty recording: no header")
	}
	if err != nil {
		return nil, err
	}
	var h Header
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, fmt.Errorf("line 1: header: %w", err)
	}
	if h.Format != Format {
		return nil, fmt.Errorf("line 1: not a recording (format %q, want %q)", h.Format, Format)
	}
	if h.Version != Version {
		return nil, fmt.Errorf("%w: the file is version %d, this watchdog reads version %d", ErrVersion, h.Version, Version)
	}
	rd.header = h
	return rd, nil
}

// Header is the recording's header.
func (r *Reader) Header() Header { return r.header }

// next returns the next raw line; io.EOF at a clean end of the stream.
// Every line the writer writes ends in a newline, so a last line without
// one was cut off.
func (r *Reader) next() ([]byte, error) {
	r.buf = r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.buf = append(r.buf, chunk...)
		if len(r.buf) > maxLine {
			return nil, fmt.Errorf("line %d: corrupt recording: a line longer than %d bytes", r.line+1, maxLine)
		}
		switch {
		case err == nil:
			r.line++
			return r.buf[:len(r.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(r.buf) == 0:
			return nil, io.EOF
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("line %d: truncated or corrupt recording: the last line is cut off", r.line+1)
		default:
			return nil, fmt.Errorf("line %d: truncated or corrupt recording: %w", r.line+1, err)
		}
	}
}

// Next returns the next entry; io.EOF after the last.
func (r *Reader) Next() (Entry, error) {
	for {
		raw, err := r.next()
		if err != nil {
			return Entry{}, err
		}
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			return Entry{}, fmt.Errorf("line %d: corrupt entry: %w", r.line, err)
		}
		switch {
		case l.Series != nil:
			if _, dup := r.defs[l.Series.ID]; dup || l.Series.ID == 0 {
				return Entry{}, fmt.Errorf("line %d: corrupt entry: series id %d defined twice or zero", r.line, l.Series.ID)
			}
			r.defs[l.Series.ID] = *l.Series
		case l.Scrape != nil:
			sc, err := r.scrape(l.Scrape)
			if err != nil {
				return Entry{}, fmt.Errorf("line %d: corrupt entry: %w", r.line, err)
			}
			return Entry{Scrape: sc}, nil
		case l.Remove != "":
			return Entry{Removed: l.Remove}, nil
		case l.Evaluate != 0:
			return Entry{Evaluate: time.Unix(0, l.Evaluate).UTC()}, nil
		default:
			return Entry{}, fmt.Errorf("line %d: corrupt entry: none of series, scrape, remove, evaluate", r.line)
		}
	}
}

func (r *Reader) scrape(rec *scrapeRec) (*series.Scrape, error) {
	sc := &series.Scrape{Target: rec.Target, Kind: rec.Kind, Labels: rec.Labels, Address: rec.Address, At: time.Unix(0, rec.At).UTC(), Duration: time.Duration(rec.Duration),
		Reason: rec.Reason, Status: rec.Status, Error: rec.Error, Pod: rec.Pod}
	if rec.Empty {
		sc.Groups = []series.Group{}
	}
	for _, gr := range rec.Groups {
		gk := groupKey{rec.Target, gr.Worker}
		ids := r.groups[gk] // unchanged since the group's previous scrape
		if gr.Series != nil {
			ids = *gr.Series
			r.groups[gk] = ids
		}
		for _, v := range gr.Values {
			if _, ok := r.defs[v.ID]; !ok {
				return nil, fmt.Errorf("value of undefined series %d", v.ID)
			}
			r.last[v.ID] = v.Value
		}
		for _, d := range gr.Deltas {
			old, ok := r.last[d.ID]
			if !ok || !wholeNumber(old) || d.Value != math.Trunc(d.Value) {
				return nil, fmt.Errorf("delta %v of series %d, whose value is %v", d.Value, d.ID, old)
			}
			r.last[d.ID] = old + d.Value
		}
		g := series.Group{Worker: gr.Worker, Model: gr.Model, EngineType: gr.EngineType, Labels: gr.Labels, Samples: make([]series.Sample, len(ids))}
		for i, id := range ids {
			def, ok := r.defs[id]
			v, seen := r.last[id]
			if !ok || !seen {
				return nil, fmt.Errorf("group %q of %s: series %d has no definition or value", gr.Worker, rec.Target, id)
			}
			s := series.Sample{Name: def.Name, Value: v}
			if len(def.Labels) > 0 {
				s.Labels = make(series.Labels, len(def.Labels))
				for j, l := range def.Labels {
					s.Labels[j] = series.Label{Name: l[0], Value: l[1]}
				}
			}
			g.Samples[i] = s
		}
		sc.Groups = append(sc.Groups, g)
	}
	return sc, nil
}
