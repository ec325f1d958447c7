package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MaxLoopbackReplicas bounds a LoopbackFleet: a benchmark, not a load
// generator.
const MaxLoopbackReplicas = 20_000

// loopbackSources is how many replicas are really simulated; every served
// replica renders one of them with its own counter scale. Eight give the
// fleet distinct gauge trajectories at a fixed simulation cost, whatever N.
const loopbackSources = 8

// loopbackRefresh is how often the simulated sources advance and are
// rendered again: every scrape in between reads the same frame, so the cost
// of simulating does not grow with the number of replicas or scrapes.
const loopbackRefresh = time.Second

// LoopbackConfig configures NewLoopback.
type LoopbackConfig struct {
	Replicas int // 1..MaxLoopbackReplicas
	Seed     uint64
	// Incident, when set, is an incident class (ClassPreemptStorm...) that
	// starts IncidentAfter the fleet's start on the replicas rendered from
	// source 0: one in eight (replica 0, 8, 16, ...).
	Incident      string
	IncidentAfter time.Duration
	// Now is the clock the fleet advances by, read when a request arrives.
	Now func() time.Time
	// UserAgents are User-Agent prefixes whose /metrics requests are
	// counted per replica (see ReplicasScraped), e.g. "Prometheus/".
	UserAgents []string
}

// Loopback serves many simulated SGLang replicas from one handler, one path
// per replica:
//
//	GET /replicas/<i>/metrics           the exposition of replica i (gzip-compressed when asked for, as SGLang's server does)
//	GET /replicas/<i>/health_generate   200 (as /health)
//
// Only loopbackSources replicas are simulated; replica i renders source
// i mod loopbackSources with its counters and histograms scaled by a factor
// of its own (gauges as the source has them), so every replica's counters
// grow at its own rate, its gauges move, and the bytes are the real
// exposition. A replica whose source process is down drops the connection.
type Loopback struct {
	cfg    LoopbackConfig
	sim    *Fleet
	scale  []float64 // per replica
	frame  atomic.Pointer[loopbackFrame]
	mu     sync.Mutex // one refresh at a time; scrapes never wait for it
	counts [][]atomic.Int64
	bufs   sync.Pool
	// expositions answers /metrics requests, gzip-compressed for clients
	// that ask, as SGLang's server does.
	expositions ExpositionWriter
}

// loopbackFrame is the sources' expositions at one instant, split into
// templates. It is immutable once published.
type loopbackFrame struct {
	at      time.Time
	sources []*template // nil: that source's process is down
}

// template is an exposition with its sample values cut out: text[i] comes
// before value i, and the last element of text ends the body.
type template struct {
	text   [][]byte
	values []float64
	scaled []scaling
}

// scaling is how a sample follows its replica's scale.
type scaling uint8

const (
	unscaled    scaling = iota // gauges: as the source has them
	scaledFloat                // histogram sums and counters of seconds
	scaledCount                // counters of things (requests, tokens), histogram buckets and counts: rounded, as counts are whole
)

// NewLoopback builds the fleet, simulating its sources' warm-up, and renders
// its first frame. It starts nothing.
func NewLoopback(cfg LoopbackConfig) (*Loopback, error) {
	if cfg.Replicas < 1 || cfg.Replicas > MaxLoopbackReplicas {
		return nil, fmt.Errorf("sim: loopback fleet of %d replicas: want 1 to %d", cfg.Replicas, MaxLoopbackReplicas)
	}
	if cfg.Now == nil {
		return nil, errors.New("sim: loopback fleet needs a clock (Now)")
	}
	scenario := HealthyScenario()
	if cfg.Incident != "" {
		s, err := IncidentScenario(cfg.Incident)
		if err != nil {
			return nil, err
		}
		s.Phases[0].Duration = cfg.IncidentAfter
		scenario = s
	}
	start := cfg.Now()
	l := &Loopback{
		cfg:    cfg,
		sim:    NewFleet(FleetConfig{Replicas: min(cfg.Replicas, loopbackSources), Seed: cfg.Seed, Start: start, Scenario: scenario, Warmup: time.Minute}),
		scale:  make([]float64, cfg.Replicas),
		counts: make([][]atomic.Int64, len(cfg.UserAgents)),
	}
	for i := range l.scale {
		// Deterministic, between 0.8 and 1.2: replicas differ in traffic.
		l.scale[i] = 0.8 + 0.4*float64((uint64(i)*2654435761)%1000)/1000
	}
	for k := range l.counts {
		l.counts[k] = make([]atomic.Int64, cfg.Replicas)
	}
	if err := l.refresh(start); err != nil {
		return nil, err
	}
	return l, nil
}

// Replicas is the number of replicas served.
func (l *Loopback) Replicas() int { return len(l.scale) }

// MetricsPath is the path of replica i's exposition.
func MetricsPath(i int) string { return "/replicas/" + strconv.Itoa(i) + "/metrics" }

// ScrapeCounts is, per replica, how many /metrics requests came from
// clients whose User-Agent starts with cfg.UserAgents[k].
func (l *Loopback) ScrapeCounts(k int) []int64 {
	out := make([]int64, len(l.counts[k]))
	for i := range out {
		out[i] = l.counts[k][i].Load()
	}
	return out
}

// ReplicasScraped is how many replicas have had their /metrics read at
// least once by a client whose User-Agent starts with cfg.UserAgents[k].
func (l *Loopback) ReplicasScraped(k int) int { return ReplicasGrown(nil, l.ScrapeCounts(k)) }

// ReplicasGrown is how many replicas' counts grew from before to after
// (before nil: from zero).
func ReplicasGrown(before, after []int64) int {
	n := 0
	for i, c := range after {
		if before == nil && c > 0 || before != nil && c > before[i] {
			n++
		}
	}
	return n
}

// Handler serves every replica.
func (l *Loopback) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /replicas/{i}/metrics", func(w http.ResponseWriter, r *http.Request) {
		i, ok := l.replica(w, r)
		if !ok {
			return
		}
		for k, prefix := range l.cfg.UserAgents {
			if strings.HasPrefix(r.UserAgent(), prefix) {
				l.counts[k][i].Add(1)
			}
		}
		sources := l.current().sources
		t := sources[i%len(sources)]
		if t == nil {
			dropConnection(w)
			return
		}
		buf, _ := l.bufs.Get().(*[]byte)
		if buf == nil {
			buf = new([]byte)
		}
		*buf = t.render((*buf)[:0], l.scale[i])
		l.expositions.Write(w, r, http.StatusOK, *buf)
		l.bufs.Put(buf)
	})
	for _, p := range []string{"health", "health_generate"} {
		mux.HandleFunc("GET /replicas/{i}/"+p, func(w http.ResponseWriter, r *http.Request) {
			i, ok := l.replica(w, r)
			if !ok {
				return
			}
			if sources := l.current().sources; sources[i%len(sources)] == nil {
				dropConnection(w)
			}
		})
	}
	return mux
}

// replica parses the path's replica index, answering 404 when there is no
// such replica.
func (l *Loopback) replica(w http.ResponseWriter, r *http.Request) (int, bool) {
	i, err := strconv.Atoi(r.PathValue("i"))
	if err != nil || i < 0 || i >= len(l.scale) {
		http.NotFound(w, r)
		return 0, false
	}
	return i, true
}

// current returns the frame for now, refreshing it when it is older than
// loopbackRefresh. Only one request refreshes; the others meanwhile serve
// the previous frame rather than wait.
func (l *Loopback) current() *loopbackFrame {
	f := l.frame.Load()
	now := l.cfg.Now()
	if now.Sub(f.at) >= loopbackRefresh && l.mu.TryLock() {
		defer l.mu.Unlock()
		if err := l.refresh(now); err == nil {
			f = l.frame.Load()
		}
	}
	return f
}

// refresh advances the sources to now and publishes their templates.
func (l *Loopback) refresh(now time.Time) error {
	l.sim.Advance(now)
	f := &loopbackFrame{at: now, sources: make([]*template, len(l.sim.replicas))}
	var b bytes.Buffer
	for k := range f.sources {
		b.Reset()
		err := l.sim.WriteMetrics(&b, k)
		if errors.Is(err, ErrReplicaDown) {
			continue
		}
		if err != nil {
			return err
		}
		t, err := newTemplate(b.Bytes())
		if err != nil {
			return err
		}
		f.sources[k] = t
	}
	l.frame.Store(f)
	return nil
}

// newTemplate cuts the values out of an exposition rendered by writer: one
// sample per line, the value after the last space.
func newTemplate(expo []byte) (*template, error) {
	t := &template{}
	var text []byte
	var kind string // of the current family
	for line := range bytes.Lines(expo) {
		if bytes.HasPrefix(line, []byte("# TYPE ")) {
			if f := strings.Fields(string(line)); len(f) == 4 {
				kind = f[3]
			}
		}
		if line[0] == '#' {
			text = append(text, line...)
			continue
		}
		sp := bytes.LastIndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("sim: exposition line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(string(bytes.TrimSpace(line[sp+1:])), 64)
		if err != nil {
			return nil, fmt.Errorf("sim: exposition line %q: %w", line, err)
		}
		sc := unscaled
		switch name, _, _ := bytes.Cut(line[:sp], []byte("{")); {
		case kind == "histogram" && (bytes.HasSuffix(name, []byte("_bucket")) || bytes.HasSuffix(name, []byte("_count"))):
			sc = scaledCount
		case kind == "counter" && !bytes.HasSuffix(name, []byte("_seconds_total")):
			sc = scaledCount
		case kind == "histogram" || kind == "counter":
			sc = scaledFloat
		}
		text = append(text, line[:sp+1]...)
		t.text = append(t.text, text)
		t.values = append(t.values, v)
		t.scaled = append(t.scaled, sc)
		text = []byte("\n")
	}
	if len(t.values) > 0 {
		t.text = append(t.text, text)
	} else {
		t.text = [][]byte{text}
	}
	return t, nil
}

// render appends the exposition with counters scaled by scale.
func (t *template) render(b []byte, scale float64) []byte {
	for i, v := range t.values {
		b = append(b, t.text[i]...)
		switch t.scaled[i] {
		case scaledFloat:
			v *= scale
		case scaledCount:
			v = math.Round(v * scale)
		}
		b = strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return append(b, t.text[len(t.text)-1]...)
}
