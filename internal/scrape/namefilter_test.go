package scrape

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// filterFamilies are the families the prometheus_client test server's
// readers would read: a labelled gauge, a counter and a histogram.
var filterFamilies = []string{series.NumRunningReqs, series.PromptTokensTotal, series.TTFTSeconds}

// prometheusClientPython is an interpreter that imports prometheus_client:
// the first python3 on PATH, else Debian's, where its package installs it.
func prometheusClientPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		path, err := exec.LookPath(py)
		if err != nil {
			tried = append(tried, py+": "+err.Error())
			continue
		}
		out, err := exec.Command(path, "-c", "import prometheus_client").CombinedOutput()
		if err == nil {
			return path
		}
		tried = append(tried, path+": "+strings.TrimSpace(string(out)))
	}
	t.Fatalf("python3 with prometheus_client is needed (Debian's python3-prometheus-client; .ci/run installs it): %s", strings.Join(tried, "; "))
	return ""
}

// startPrometheusClient runs testdata/prometheus_client_server.py in mode
// (single or multiprocess) and returns its /metrics URL.
func startPrometheusClient(t *testing.T, mode string) string {
	t.Helper()
	cmd := exec.Command(prometheusClientPython(t), filepath.Join("testdata", "prometheus_client_server.py"), mode)
	cmd.Env = os.Environ()
	if mode == "multiprocess" {
		cmd.Env = append(cmd.Env, "PROMETHEUS_MULTIPROC_DIR="+t.TempDir())
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	port, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("prometheus_client server did not say its port: %v", err)
	}
	return "http://127.0.0.1:" + strings.TrimSpace(port) + "/metrics"
}

// exposedFamilies are the TYPE lines' family names of an exposition.
func exposedFamilies(t *testing.T, url string) []string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v, HTTP %d", err, resp.StatusCode)
	}
	var out []string
	for line := range strings.Lines(string(body)) {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			out = append(out, strings.Fields(f)[0])
		}
	}
	slices.Sort(out)
	return out
}

func filterScraper(t *testing.T) (*scraper, *familyFilter) {
	t.Helper()
	opts, err := Options{KeepFamilies: filterFamilies}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return newScraper(httpFetcher(oneClient(client(t)), opts), opts), newFamilyFilter(newKeepSet(filterFamilies), time.Minute)
}

// scrapeOutcome scrapes tg once through f and checks the outcome.
func scrapeOutcome(t *testing.T, s *scraper, tg Target, f *familyFilter, want string) []string {
	t.Helper()
	sc := s.scrape(t.Context(), tg, f)
	if sc.Reason != "" {
		t.Fatalf("scrape: %s %s", sc.Reason, sc.Error)
	}
	if f.outcome != want {
		t.Errorf("outcome %q, want %q", f.outcome, want)
	}
	return renderGroups(sc.Groups)
}

// Against the real prometheus_client: asked for the kept families by their
// sample names, a single-process exposition renders exactly those; the
// filtered scrape's series equal the full scrape's. A multiprocess one
// renders them only from the releases whose MultiProcessCollector filters
// (older ones answer with nothing): the scrape then falls back to a full
// one, with the same series, and stays unfiltered.
func TestFamilyFilterAgainstPrometheusClient(t *testing.T) {
	for _, mode := range []string{"single", "multiprocess"} {
		t.Run(mode, func(t *testing.T) {
			url := startPrometheusClient(t, mode)
			if got := exposedFamilies(t, url); !slices.Contains(got, "sglang:spec_accept_rate") {
				t.Fatalf("the full exposition lacks the unread family: %q", got)
			}
			s, f := filterScraper(t)
			tg := Target{Name: "r", URL: url, Kind: KindEngine}
			full := scrapeOutcome(t, s, tg, f, filterFull)
			if len(full) == 0 {
				t.Fatal("the full scrape kept nothing")
			}

			asked := exposedFamilies(t, f.url(url))
			wantAsked := []string{series.NumRunningReqs, series.PromptTokensTotal, series.TTFTSeconds}
			slices.Sort(wantAsked)
			switch {
			case mode == "single" || len(asked) > 0:
				if !slices.Equal(asked, wantAsked) {
					t.Fatalf("filtered exposition holds %q, want exactly %q", asked, wantAsked)
				}
				diffLines(t, "filtered", scrapeOutcome(t, s, tg, f, filterFiltered), full)
			default: // a multiprocess release that does not filter
				diffLines(t, "fallback", scrapeOutcome(t, s, tg, f, filterFallback), full)
				diffLines(t, "after the fallback", scrapeOutcome(t, s, tg, f, filterFull), full)
			}
		})
	}
}

// filterServer serves body in full, and a filtered request (one with
// name[]) as answer says; it records whether each request asked.
type filterServer struct {
	body   []byte
	answer func(w http.ResponseWriter, full []byte)
	mu     sync.Mutex
	asked  []bool
}

func (s *filterServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	filtered := r.URL.Query().Has(nameParam)
	s.mu.Lock()
	s.asked = append(s.asked, filtered)
	s.mu.Unlock()
	if filtered {
		s.answer(w, s.body)
		return
	}
	_, _ = w.Write(s.body)
}

func (s *filterServer) lastAsked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[len(s.asked)-1]
}

// A filtered answer that cannot be trusted -- empty, as an old
// multiprocess prometheus_client answers, lacking a family the full scrape
// had, or refused -- is replaced by a full scrape in the same cycle, and
// the target is scraped in full afterwards. A server that ignores the
// filter loses nothing: its full answer is accepted.
func TestFamilyFilterFallsBack(t *testing.T) {
	body := currentFull(t)
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, full []byte)
		want   string
	}{
		{"empty answer", func(http.ResponseWriter, []byte) {}, filterFallback},
		{"a family missing", func(w http.ResponseWriter, full []byte) {
			for line := range strings.Lines(string(full)) {
				if !strings.Contains(line, series.TTFTSeconds) {
					_, _ = io.WriteString(w, line)
				}
			}
		}, filterFallback},
		{"URL too long", func(w http.ResponseWriter, _ []byte) {
			w.WriteHeader(http.StatusRequestURITooLong)
		}, filterFallback},
		{"filter ignored", func(w http.ResponseWriter, full []byte) { _, _ = w.Write(full) }, filterFiltered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &filterServer{body: body, answer: tc.answer}
			ts := httptest.NewServer(srv)
			t.Cleanup(ts.Close)
			s, f := filterScraper(t)
			tg := Target{Name: "r", URL: ts.URL + "/metrics", Kind: KindEngine}
			full := scrapeOutcome(t, s, tg, f, filterFull)
			if srv.lastAsked() {
				t.Fatal("the first scrape asked for names: it has nothing to check an answer against")
			}
			diffLines(t, "second scrape", scrapeOutcome(t, s, tg, f, tc.want), full)
			third := scrapeOutcome(t, s, tg, f, map[string]string{filterFallback: filterFull, filterFiltered: filterFiltered}[tc.want])
			diffLines(t, "third scrape", third, full)
			if asked, want := srv.lastAsked(), tc.want == filterFiltered; asked != want {
				t.Errorf("third scrape asked for names: %v, want %v", asked, want)
			}
		})
	}
}

// A target whose filtered answers were rejected is scraped in full for the
// recheck period, then learns from a full scrape and tries filtering
// again; gateways are never asked for names.
func TestFamilyFilterRechecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval, recheck = 5 * time.Second, time.Minute
		body := currentFull(t)
		var (
			mu    sync.Mutex
			asked = map[string][]bool{}
		)
		reg := prometheus.NewRegistry()
		targets := append(engines("old"), Target{Name: "gw", URL: "http://gw:30000/metrics", Kind: KindGateway})
		m, err := New(targets, Options{Interval: interval, KeepFamilies: keptFamilies, FilterFamilies: true, FilterRecheck: recheck},
			newRecorder(t), reg, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		m.fetch = func(ctx context.Context, tg Target, buf *responseBody) error {
			filtered := strings.Contains(tg.URL, "name%5B%5D=")
			mu.Lock()
			asked[tg.Name] = append(asked[tg.Name], filtered)
			mu.Unlock()
			buf.Reset()
			if !filtered { // an old multiprocess release: empty when filtered
				buf.Write(body)
			}
			return nil
		}
		stop := startManager(t, m)
		time.Sleep(recheck + 3*interval)
		synctest.Wait()
		stop()

		// Scrape 0 learns; 1 asks and falls back (two requests); then full
		// scrapes until the recheck, one that learns, and one that asks.
		got := asked["old"]
		asks := 0
		for _, a := range got {
			if a {
				asks++
			}
		}
		if asks != 2 || !got[1] || got[2] {
			t.Errorf("engine requests asked for names %v: want the second and one after the recheck only", got)
		}
		if slices.Contains(asked["gw"], true) {
			t.Errorf("a gateway was asked for names: %v", asked["gw"])
		}
		if n := testutil.ToFloat64(m.metrics.familyFilter.WithLabelValues(filterFallback)); n != 2 {
			t.Errorf("fallbacks %v, want 2", n)
		}
		if n := testutil.ToFloat64(m.metrics.familyFilter.WithLabelValues(filterFiltered)); n != 0 {
			t.Errorf("filtered %v, want 0", n)
		}
	})
}

// filteredCapture is the current release's capture and what
// prometheus_client answers a scraper keeping the default configuration's
// families once it has learned from a full scrape of it.
func filteredCapture(b *testing.B) (reads []string, body, filtered []byte) {
	b.Helper()
	body = benchBody(b)
	reads = assess.Reads(detect.DefaultConfig())
	keep := newKeepSet(reads)
	raw, err := newTextParser(keep.filter()).Parse(nil, body)
	if err != nil {
		b.Fatal(err)
	}
	f := newFamilyFilter(keep, time.Hour)
	f.learnFrom(raw)
	q, err := url.ParseQuery(f.query)
	if err != nil {
		b.Fatal(err)
	}
	return reads, body, sim.Restrict(body, q[nameParam])
}

// BenchmarkFamilyFilter is a scrape of the current release's capture
// over loopback HTTP asked in full and one asked for the families the
// default configuration reads, in turn, so that both meet the same
// moments of a shared machine (the server answers with the filtered
// exposition prepared beforehand: prometheus_client's work is not the
// watchdog's). It reports each kind's time and body per scrape.
func BenchmarkFamilyFilter(b *testing.B) {
	reads, body, filtered := filteredCapture(b)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := body
		if strings.HasPrefix(r.URL.RawQuery, "name%5B%5D=") { // not parsed: the server's work is not the watchdog's
			out = filtered
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(out)))
		_, _ = w.Write(out)
	}))
	defer srv.Close()
	s, tg := loopbackScraper(b, srv.URL, Options{KeepFamilies: reads})
	f := newFamilyFilter(newKeepSet(reads), time.Hour)
	s.scrape(b.Context(), tg, f) // learns the names to ask
	var spent [2]time.Duration   // full, filtered
	b.ReportAllocs()
	for b.Loop() {
		for k, ff := range []*familyFilter{nil, f} {
			start := time.Now()
			if sc := s.scrape(b.Context(), tg, ff); sc.Reason != "" {
				b.Fatal(sc.Error)
			}
			spent[k] += time.Since(start)
		}
	}
	if f.outcome != filterFiltered {
		b.Fatalf("outcome %q, want %q", f.outcome, filterFiltered)
	}
	b.ReportMetric(float64(spent[0].Nanoseconds())/float64(b.N), "full-ns/scrape")
	b.ReportMetric(float64(spent[1].Nanoseconds())/float64(b.N), "filtered-ns/scrape")
	b.ReportMetric(float64(len(body)), "full-body-B/scrape")
	b.ReportMetric(float64(len(filtered)), "filtered-body-B/scrape")
	b.ReportMetric(float64(len(f.query)), "query-B/scrape")
}

// BenchmarkFamilyFilterParse is the parse and normalization alone of the
// full and the filtered exposition, by a parser keeping the default
// configuration's families.
func BenchmarkFamilyFilterParse(b *testing.B) {
	reads, body, filtered := filteredCapture(b)
	for _, c := range []struct {
		name string
		body []byte
	}{{"full", body}, {"filtered", filtered}} {
		b.Run(c.name, func(b *testing.B) {
			opts, err := Options{KeepFamilies: reads}.withDefaults()
			if err != nil {
				b.Fatal(err)
			}
			s := newScraper(nil, opts)
			b.ReportAllocs()
			b.SetBytes(int64(len(c.body)))
			for b.Loop() {
				if s.raw, err = s.parser.Parse(s.raw[:0], c.body); err != nil {
					b.Fatal(err)
				}
				if _, err := s.norm.normalizeParsed(s.raw, s.maxSeries, s.parser); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(c.body)), "body-bytes/scrape")
		})
	}
}

// The simulated replicas (the demo's and the fleet bench's) answer name[]
// as prometheus_client does: after the first full scrape, their filtered
// answers are accepted and hold the series a full scrape holds.
func TestSimulatedReplicaAnswersFilteredScrapes(t *testing.T) {
	fleet := sim.NewFleet(sim.FleetConfig{Replicas: 1, Seed: 1, Start: time.Unix(1_700_000_000, 0), Warmup: time.Minute})
	ts := httptest.NewServer(fleet.Handler(0))
	t.Cleanup(ts.Close)
	s, f := filterScraper(t)
	tg := Target{Name: "sim-0", URL: ts.URL + "/metrics", Kind: KindEngine}
	full := scrapeOutcome(t, s, tg, f, filterFull)
	if len(full) == 0 {
		t.Fatal("the full scrape kept nothing")
	}
	asked := exposedFamilies(t, f.url(tg.URL))
	want := slices.Clone(filterFamilies)
	slices.Sort(want)
	if !slices.Equal(asked, want) {
		t.Fatalf("filtered exposition holds %q, want exactly %q", asked, want)
	}
	diffLines(t, "filtered", scrapeOutcome(t, s, tg, f, filterFiltered), full)
}
