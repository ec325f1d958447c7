package runbook

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// The tests in this file hold the runbooks to the code: a page states the
// severities its detector emits, names the signals it reads, takes every
// threshold from the configuration, and names only real metrics.

func TestEveryRegistryClassHasARunbookAndEveryClassPageADetector(t *testing.T) {
	b := newTestBook(t)
	registry := map[string]bool{}
	for _, e := range detect.Registry() {
		c := string(e.Class())
		registry[c] = true
		if !b.Has(c) {
			t.Errorf("detector %s has no runbook page with a %q section", c, decisionSection)
		}
	}
	for _, c := range b.Classes() {
		if !registry[c] && !slices.Contains(nonDetectorClasses, c) {
			t.Errorf("runbook %s describes a class no detector emits and correlation does not make", c)
		}
	}
	for _, p := range b.Pages() {
		if !p.Incident && !slices.Contains(guides, p.Name) {
			t.Errorf("page %s is neither a class nor a known guide", p.Name)
		}
	}
}

// severityWords matches the severity names in a page's text.
var severityWords = regexp.MustCompile(`\b(info|warning|critical)\b`)

func TestRunbookSeveritiesAreTheDetectorsSeverities(t *testing.T) {
	b := newTestBook(t)
	pages := map[string]Page{}
	for _, p := range b.Pages() {
		pages[p.Name] = p
	}
	for _, e := range detect.Registry() {
		c := string(e.Class())
		p, ok := pages[c]
		if !ok {
			continue // reported by the registry test
		}
		if !slices.Equal(p.Severities, e.Severities()) {
			t.Errorf("%s: the runbook describes %v, the detector emits %v", c, p.Severities, e.Severities())
		}
	}
	// The header's severity sentence names exactly the declared
	// severities, so the prose cannot drift from the front matter.
	for _, p := range b.Pages() {
		if !p.Incident {
			continue
		}
		src, _ := b.Markdown(p.Name)
		line := severityLine(parseOutline([]byte(src)).header)
		var named []detect.Severity
		for _, w := range severityWords.FindAllString(line, -1) {
			sev, _ := detect.ParseSeverity(w)
			if !slices.Contains(named, sev) {
				named = append(named, sev)
			}
		}
		slices.Sort(named)
		if !slices.Equal(named, p.Severities) {
			t.Errorf("%s: the severity line names %v, the front matter %v: %q", p.Name, named, p.Severities, line)
		}
	}
}

// severityLine is the text from "**Severity:**" to the end of its
// paragraph.
func severityLine(header string) string {
	_, after, ok := strings.Cut(header, "**Severity:**")
	if !ok {
		return ""
	}
	para, _, _ := strings.Cut(after, "\n\n")
	return para
}

func TestRunbookNamesEverySignalItsDetectorNeeds(t *testing.T) {
	b := newTestBook(t)
	for _, e := range detect.Registry() {
		src, ok := b.Markdown(string(e.Class()))
		if !ok {
			continue
		}
		decided := parseOutline([]byte(src)).body[decisionSection]
		for _, family := range e.Signals() {
			name := family
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			if !metricMention(name).MatchString(decided) {
				t.Errorf("%s: %q does not name %s, which the detector needs", e.Class(), decisionSection, name)
			}
		}
	}
}

// metricMention matches a family name as a whole token.
func metricMention(name string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_:])` + regexp.QuoteMeta(name) + `($|[^A-Za-z0-9_])`)
}

// metricName matches a family of SGLang, the model gateway or the legacy
// router as written in a page.
var metricName = regexp.MustCompile(`\b(sglang:[A-Za-z0-9_]+|smg_[a-z0-9_]+|sgl_router_[a-z0-9_]+)`)

// realMetricNames are the families of testdata/metric_names.txt (copied
// from the reference) and the constants of pkg/series.
func realMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	f, err := os.Open("testdata/metric_names.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			names[line] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range seriesConstants(t) {
		if metricName.MatchString(c) {
			names[c] = true
		}
	}
	return names
}

// seriesConstants are the string constants of pkg/series, read from its
// source: the families the watchdog itself reads.
func seriesConstants(t *testing.T) []string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "../../pkg/series/series.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(file, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for _, v := range vs.Values {
			if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					out = append(out, s)
				}
			}
		}
		return true
	})
	if !slices.Contains(out, "sglang:num_retracted_requests_total") {
		t.Fatalf("pkg/series constants not found (got %d strings)", len(out))
	}
	return out
}

func TestEveryMetricARunbookNamesIsReal(t *testing.T) {
	real := realMetricNames(t)
	b := newTestBook(t)
	for _, p := range b.Pages() {
		src, _ := b.Markdown(p.Name)
		for _, name := range metricName.FindAllString(src, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(name, suffix); ok && real[s] {
					base = s
				}
			}
			if !real[base] {
				t.Errorf("%s names %s, which is neither in the reference nor a pkg/series family", p.Name, name)
			}
		}
	}
	for _, name := range deniedMetrics {
		if real["sglang:"+name] {
			t.Errorf("the real names list the tutorial name %s", name)
		}
	}
}

// A class page's severity line and decision section may not type a
// threshold by hand: a number or a settings path outside a template action
// fails (a threshold is {{setting ...}}). Code spans are the reader's
// commands and sample values, not thresholds.
var (
	templateAction = regexp.MustCompile(`\{\{.*?\}\}`)
	codeSpan       = regexp.MustCompile("`[^`]*`")
	digit          = regexp.MustCompile(`[^\s]*[0-9][^\s]*`)
	// notThresholds are numbers that are names: quantiles, HTTP statuses,
	// release versions.
	notThresholds = regexp.MustCompile(`\b(p50|p90|p99|[45]xx|404|408|429|499|500|503|v0\.[0-9]+)\b`)
)

// sglangFacts are numbers of SGLang and HTTP (reference sglang-metrics.md),
// not watchdog settings, that a decision section may state.
var sglangFacts = []string{
	"20 s",      // SGLANG_HEALTH_CHECK_TIMEOUT: /health_generate gives up after it
	"40 decode", // --decode-log-interval: gauges are written every 40 decode steps
	"HTTP 200",
}

// rawPage is an embedded page as written: template text, front matter
// removed.
type rawPage struct{ name, text string }

func rawPages(t *testing.T) []rawPage {
	t.Helper()
	files, err := fs.Glob(embedded, "pages/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no pages: %v", err)
	}
	var out []rawPage
	for _, f := range files {
		src, err := embedded.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(src)
		if rest, ok := strings.CutPrefix(text, "---\n"); ok {
			_, text, _ = strings.Cut(rest, "\n---\n")
		}
		out = append(out, rawPage{strings.TrimSuffix(path.Base(f), ".md"), text})
	}
	return out
}

func TestRunbookThresholdsComeFromTheConfiguration(t *testing.T) {
	for _, p := range rawPages(t) {
		o := parseOutline([]byte(p.text))
		decided, ok := o.body[decisionSection]
		if !ok {
			continue
		}
		// The decision's own bullets: a "###" subsection after them (likely
		// causes, reading a failure reason) explains, it does not decide.
		if i := strings.Index(decided, "\n### "); i >= 0 {
			decided = decided[:i]
		}
		text := severityLine(o.header) + "\n" + decided
		text = templateAction.ReplaceAllString(text, "")
		text = codeSpan.ReplaceAllString(text, "")
		if strings.Contains(text, "detectors.") {
			t.Errorf("%s: a settings path typed by hand; use {{key \"detectors....\"}}", p.name)
		}
		for _, fact := range sglangFacts {
			text = strings.ReplaceAll(text, fact, "")
		}
		text = notThresholds.ReplaceAllString(text, "")
		for _, m := range digit.FindAllString(text, -1) {
			t.Errorf("%s: %q typed by hand in the severity line or %q; take it from the configuration with {{setting ...}}", p.name, m, decisionSection)
		}
	}
}

func TestRunbooksShowTheRunningConfiguration(t *testing.T) {
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(c *detect.PreemptStormConfig) { c.CriticalRetractionsPerSecond = 7.25 })
	detect.Edit(&cfg, func(c *detect.CacheCollapseConfig) { c.CriticalTTFTRatio = 3.5 })
	detect.Edit(&cfg, func(c *detect.ColdStartConfig) { c.StartupBudget = 7 * time.Minute; c.CriticalAfter = 95 * time.Minute })
	detect.Edit(&cfg, func(c *detect.ErrorRateConfig) { c.WarningRatio = 0.023 })
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"preempt_storm":  {"7.25"},
		"cache_collapse": {"3.5"},
		"cold_start":     {"7m", "1h35m", "(now 7m)"},
		"error_rate":     {"2.3%"},
	}

	b := newTestBook(t)
	srv := httptest.NewServer(b)
	defer srv.Close()
	for class, values := range want {
		_, page := get(t, srv.URL+"/runbooks/"+class)
		for _, v := range values {
			if metricMention(v).MatchString(page) {
				t.Errorf("%s: %q shown before the configuration has it", class, v)
			}
		}
	}
	if md, _ := b.Markdown("cold_start"); !strings.Contains(md, "`detectors.cold_start.startup_budget` (now 15m)") {
		t.Error("cold_start does not name the startup budget's setting with its value")
	}
	// A reload renders the pages first and serves them with the rest of
	// the configuration.
	next, err := b.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, page := get(t, srv.URL+"/runbooks/preempt_storm"); strings.Contains(page, "7.25") {
		t.Error("a prepared rendering is served before it is published")
	}
	b.Publish(next)
	for class, values := range want {
		resp, page := get(t, srv.URL+"/runbooks/"+class)
		md, _ := b.Markdown(class)
		for _, v := range values {
			if resp.StatusCode != http.StatusOK || !strings.Contains(page, v) || !strings.Contains(md, v) {
				t.Errorf("%s: the page does not show the configured %s", class, v)
			}
		}
	}
}

func TestADisabledDetectorsPageSaysSo(t *testing.T) {
	cfg := detect.DefaultConfig()
	detect.Edit(&cfg, func(c *detect.LoraThrashConfig) { c.Enabled = false })
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b)
	defer srv.Close()
	const note = "switched off in this watchdog"
	if _, page := get(t, srv.URL+"/runbooks/lora_thrash"); !strings.Contains(page, note) {
		t.Error("lora_thrash is off but its page does not say so")
	}
	if _, page := get(t, srv.URL+"/runbooks/preempt_storm"); strings.Contains(page, note) {
		t.Error("preempt_storm is on but its page says it is off")
	}
}

func TestEmergencyStepsAreSafeOnALiveReplica(t *testing.T) {
	b := newTestBook(t)
	for _, class := range b.Classes() {
		src, _ := b.Markdown(class)
		steps := parseOutline([]byte(src)).body["Emergency steps"]
		for _, item := range regexp.MustCompile(`(?m)^\d+\. `).Split(steps, -1) {
			// Flushing the radix cache drops every cached prefix: on a
			// serving replica it turns a slow incident into a cold one.
			if strings.Contains(item, "flush_cache") && !strings.Contains(item, "drained") {
				t.Errorf("%s: an emergency step flushes the cache without draining the replica first: %q", class, item)
			}
		}
	}
}

func TestTheOnCallWorkflowPointsToEveryClass(t *testing.T) {
	b := newTestBook(t)
	src, _ := b.Markdown("triage")
	which := parseOutline([]byte(src)).body["Which page when"]
	for _, class := range b.Classes() {
		if !strings.Contains(which, "]("+class+")") {
			t.Errorf("the on-call workflow's %q does not link %s", "Which page when", class)
		}
	}
}

func TestMetricsBlindListsWhatEachDetectorReads(t *testing.T) {
	b := newTestBook(t)
	src, _ := b.Markdown("metrics_blind")
	for _, e := range detect.Registry() {
		families := e.Signals()
		if len(families) == 0 {
			continue
		}
		var row string
		for _, line := range strings.Split(src, "\n") {
			if strings.HasPrefix(line, "| "+string(e.Class())+" |") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("metrics_blind has no row for %s", e.Class())
			continue
		}
		for _, f := range families {
			if !strings.Contains(row, "`"+strings.TrimSuffix(f, "_count")+"`") {
				t.Errorf("metrics_blind's row for %s lacks %s: %q", e.Class(), f, row)
			}
		}
	}
}
