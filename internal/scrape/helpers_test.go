package scrape

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serve starts an httptest server answering every request with body.
func serve(t *testing.T, body []byte) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// client returns a client of its own whose idle connections are closed at
// the end of the test, so goleak sees no transport goroutines.
func client(t *testing.T) *http.Client {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// parseLabels reads `a="1",b="2"` (no escapes) into labels.
func parseLabels(s string) series.Labels {
	if s == "" {
		return nil
	}
	var ls series.Labels
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		ls = append(ls, series.Label{Name: k, Value: strings.Trim(v, `"`)})
	}
	return ls.Sort()
}

// find returns the value of the series name{labels} in g.
func find(g series.Group, name, labels string) (float64, bool) {
	want := series.Sample{Name: name, Labels: parseLabels(labels)}.Key()
	for _, s := range g.Samples {
		if s.Key() == want {
			return s.Value, true
		}
	}
	return 0, false
}

// check is one expected series value; absent means it must not exist.
type check struct {
	name, labels string
	want         float64
	absent       bool
}

func assertChecks(t *testing.T, g series.Group, checks []check) {
	t.Helper()
	for _, c := range checks {
		got, ok := find(g, c.name, c.labels)
		switch {
		case c.absent && ok:
			t.Errorf("%s{%s} = %v, want absent", c.name, c.labels, got)
		case c.absent:
		case !ok:
			t.Errorf("%s{%s} missing", c.name, c.labels)
		case !sameValue(got, c.want):
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

func sameValue(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return a == b || math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))
}

// recorder is a fake Appender (and target remover) that hands every scrape
// to the test through a buffered channel.
type recorder struct {
	t       *testing.T
	scrapes chan series.Scrape

	mu      sync.Mutex
	removed []string
	err     error // returned by Append
}

func newRecorder(t *testing.T) *recorder {
	return &recorder{t: t, scrapes: make(chan series.Scrape, 4096)}
}

// Append keeps a deep copy of s: the scraper reuses its groups, samples
// and labels once Append returns.
func (r *recorder) Append(s series.Scrape) error {
	s.Groups = cloneGroups(s.Groups)
	select {
	case r.scrapes <- s:
	default:
		r.t.Errorf("recorder overflow")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *recorder) Remove(target string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, target)
}

func (r *recorder) removedTargets() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.removed...)
}

func cloneGroups(groups []series.Group) []series.Group {
	if groups == nil {
		return nil
	}
	out := make([]series.Group, len(groups))
	for i, g := range groups {
		out[i] = g
		out[i].Samples = make([]series.Sample, len(g.Samples))
		for k, smp := range g.Samples {
			smp.Labels = slices.Clone(smp.Labels)
			out[i].Samples[k] = smp
		}
	}
	return out
}
