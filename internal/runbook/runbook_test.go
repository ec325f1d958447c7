package runbook

import (
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// incidentClasses is every class the watchdog pages for: one per registry
// entry, plus the classes correlation makes. Each must have a page with the
// class structure, and every class page must be one of them.
var incidentClasses = func() []string {
	out := slices.Clone(nonDetectorClasses)
	for _, e := range detect.Registry() {
		out = append(out, string(e.Class()))
	}
	slices.Sort(out)
	return out
}()

// nonDetectorClasses are incident classes no detector emits: a fleet
// incident is made by correlation from several replicas' findings, an
// SLO burn from a model's events (internal/slo).
var nonDetectorClasses = []string{"fleet", "slo_burn"}

// guides are pages that are not incident classes.
var guides = []string{"output_quality", "triage"}

// requiredSections are the level-2 sections of every class page, in order.
var requiredSections = []string{
	"What it looks like",
	"How the watchdog decided",
	"Emergency steps",
	"Root-cause fixes",
	"What to look at next",
	"Postmortem",
}

// deniedMetrics are names from tutorials that SGLang does not expose
// (sglang-metrics.md §9). Matched as whole names, with or without the
// sglang: prefix.
var deniedMetrics = []string{
	"num_waiting_reqs",
	"cache_hit_ratio",
	"ttft_seconds",
	"e2e_req_latency_seconds",
	"kv_pool_used",
	"lora_swap_count",
	"gpu_memory_usage_bytes",
	"prefill_throughput",
}

func newTestBook(t *testing.T) *Book {
	t.Helper()
	b, err := New(detect.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func get(t *testing.T, u string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// outline is a page's structure from its markdown syntax tree (so headings
// inside code blocks, such as the postmortem templates, do not count).
type outline struct {
	title    string
	header   string   // source between the title and the first section
	sections []string // level-2 headings in order
	body     map[string]string
}

func parseOutline(src []byte) outline {
	doc := goldmark.New().Parser().Parse(text.NewReader(src))
	o := outline{body: map[string]string{}}
	type mark struct {
		name  string
		start int
	}
	var marks []mark
	titleEnd := -1
	for n := doc.FirstChild(); n != nil; n = n.NextSibling() {
		h, ok := n.(*ast.Heading)
		if !ok || h.Lines().Len() == 0 {
			continue
		}
		seg := h.Lines().At(0)
		switch {
		case h.Level == 1 && o.title == "":
			o.title = plainText(h, src)
			titleEnd = seg.Stop
		case h.Level == 2:
			o.sections = append(o.sections, plainText(h, src))
			marks = append(marks, mark{plainText(h, src), seg.Start})
		}
	}
	end := len(src)
	if len(marks) > 0 {
		end = marks[0].start
	}
	if titleEnd >= 0 && titleEnd <= end {
		o.header = string(src[titleEnd:end])
	}
	for i, m := range marks {
		stop := len(src)
		if i+1 < len(marks) {
			stop = marks[i+1].start
		}
		o.body[m.name] = string(src[m.start:stop])
	}
	return o
}

func TestEveryClassHasAPageWithTheRequiredSectionsInOrder(t *testing.T) {
	b := newTestBook(t)
	for _, class := range incidentClasses {
		src, ok := b.Markdown(class)
		if !ok {
			t.Errorf("%s: no runbook", class)
			continue
		}
		if !b.Has(class) {
			t.Errorf("%s: Has = false", class)
		}
		o := parseOutline([]byte(src))
		if o.title == "" {
			t.Errorf("%s: no title", class)
		}
		if !slices.Equal(o.sections, requiredSections) {
			t.Errorf("%s: sections\n got %q\nwant %q", class, o.sections, requiredSections)
			continue
		}
		if !strings.Contains(o.header, "**Layer:**") || !strings.Contains(o.header, "**Severity:**") {
			t.Errorf("%s: the header must give the layer and the severity; got %q", class, o.header)
		}
		if !regexp.MustCompile(`(?m)^\s*1\. `).MatchString(o.body["Emergency steps"]) {
			t.Errorf("%s: emergency steps are not a numbered list", class)
		}
		next := strings.ToLower(o.body["What to look at next"])
		for _, want := range []string{"`rid`", "finish_reason", "per-stage timings", "compare"} {
			if !strings.Contains(next, want) {
				t.Errorf("%s: %q does not mention %s", class, "What to look at next", want)
			}
		}
		pm := strings.ToLower(o.body["Postmortem"])
		for _, want := range []string{"## summary", "severity", "## timeline", "## root cause", "what went well", "what went wrong", "owner", "due", "blameless"} {
			if !strings.Contains(pm, want) {
				t.Errorf("%s: postmortem template lacks %q", class, want)
			}
		}
	}
	// The list above is complete: no class page is left untested.
	if got := b.Classes(); !slices.Equal(got, incidentClasses) {
		t.Errorf("Classes() = %q, want %q", got, incidentClasses)
	}
}

func TestGuidesExistAndAreNotClasses(t *testing.T) {
	b := newTestBook(t)
	for _, g := range guides {
		if _, ok := b.Markdown(g); !ok {
			t.Errorf("%s: no page", g)
		}
		if b.Has(g) {
			t.Errorf("%s: a guide must not count as an incident class", g)
		}
	}
	var names []string
	for _, p := range b.Pages() {
		names = append(names, p.Name)
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(incidentClasses), guides...)))
	if !slices.Equal(names, want) {
		t.Errorf("Pages() = %q, want %q", names, want)
	}
	if b.Has("no_such_class") {
		t.Error("Has(no_such_class) = true")
	}

	src, _ := b.Markdown("output_quality")
	if !strings.Contains(src, "does not page") {
		t.Error("output_quality must say the watchdog does not page for it")
	}
	tri, _ := b.Markdown("triage")
	order := []string{"metrics", "`rid`", "queue wait", "profiler", "histograms before and after", "Postmortem"}
	at := 0
	for _, step := range order {
		i := strings.Index(tri[at:], step)
		if i < 0 {
			t.Errorf("triage: %q missing or out of order (expected order %q)", step, order)
			break
		}
		at += i
	}
}

var h2HTML = regexp.MustCompile(`<h2[^>]*>(.*?)</h2>`)

func TestEveryPageRendersItsSectionsAsHTML(t *testing.T) {
	b := newTestBook(t)
	srv := httptest.NewServer(b)
	defer srv.Close()
	for _, p := range b.Pages() {
		resp, body := get(t, srv.URL+"/runbooks/"+p.Name)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("%s: status %d, content type %q", p.Name, resp.StatusCode, resp.Header.Get("Content-Type"))
			continue
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s: missing security headers: %v", p.Name, resp.Header)
		}
		src, _ := b.Markdown(p.Name)
		want := parseOutline([]byte(src)).sections
		var got []string
		for _, m := range h2HTML.FindAllStringSubmatch(body, -1) {
			got = append(got, html.UnescapeString(regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], "")))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: rendered h2 %q, source sections %q", p.Name, got, want)
		}
		if !strings.Contains(body, "<title>"+html.EscapeString(p.Title)+" — sglang-watchdog runbook</title>") {
			t.Errorf("%s: page title missing", p.Name)
		}
		if !strings.Contains(body, `<h2 id="`) && len(want) > 0 {
			t.Errorf("%s: sections have no ids to link to", p.Name)
		}
	}
}

// wholeName matches a metric name as a token: not part of a longer name.
func wholeName(name string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_:])(sglang:)?` + regexp.QuoteMeta(name) + `($|[^A-Za-z0-9_])`)
}

func TestNoPageMentionsMetricsThatDoNotExist(t *testing.T) {
	b := newTestBook(t)
	for _, p := range b.Pages() {
		src, _ := b.Markdown(p.Name)
		for _, name := range deniedMetrics {
			if loc := wholeName(name).FindStringIndex(src); loc != nil {
				t.Errorf("%s mentions %q, which SGLang does not expose: %q", p.Name, name, src[loc[0]:loc[1]])
			}
		}
	}
	// The matcher itself: a denied name inside a longer real name is fine.
	if wholeName("ttft_seconds").MatchString("smg_router_ttft_seconds") || !wholeName("ttft_seconds").MatchString("see sglang:ttft_seconds.") {
		t.Error("wholeName matches the wrong things")
	}
}

var href = regexp.MustCompile(`href="([^"]*)"`)

func TestIndexListsAndLinksEveryPage(t *testing.T) {
	b := newTestBook(t)
	srv := httptest.NewServer(b)
	defer srv.Close()
	indexURL := srv.URL + "/runbooks/"
	resp, body := get(t, indexURL)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("index: status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	base, _ := url.Parse(indexURL)
	linked := map[string]bool{}
	for _, m := range href.FindAllStringSubmatch(body, -1) {
		ref, err := url.Parse(html.UnescapeString(m[1]))
		if err != nil {
			t.Errorf("index: bad link %q", m[1])
			continue
		}
		linked[base.ResolveReference(ref).Path] = true
	}
	for _, p := range b.Pages() {
		path := "/runbooks/" + p.Name
		if !linked[path] {
			t.Errorf("index does not link %s", path)
			continue
		}
		if r, _ := get(t, srv.URL+path); r.StatusCode != http.StatusOK {
			t.Errorf("index link %s: status %d", path, r.StatusCode)
		}
		if !strings.Contains(body, ">"+html.EscapeString(p.Title)+"</a>") {
			t.Errorf("index lacks the title of %s (%q)", p.Name, p.Title)
		}
		if !strings.Contains(body, html.EscapeString(p.Summary)) {
			t.Errorf("index lacks the one-line description of %s", p.Name)
		}
	}
	if !strings.Contains(body, `href="triage"`) || strings.Index(body, `href="triage"`) > strings.Index(body, "<h2>Incident classes</h2>") {
		t.Error("index must point to the on-call workflow before the class list")
	}
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

func TestLinksBetweenPagesResolve(t *testing.T) {
	b := newTestBook(t)
	srv := httptest.NewServer(b)
	defer srv.Close()
	for _, p := range b.Pages() {
		src, _ := b.Markdown(p.Name)
		pageURL, _ := url.Parse(srv.URL + "/runbooks/" + p.Name)
		for _, m := range mdLink.FindAllStringSubmatch(src, -1) {
			ref, err := url.Parse(m[1])
			if err != nil || ref.IsAbs() {
				t.Errorf("%s: link %q must be a relative link to another runbook", p.Name, m[1])
				continue
			}
			target := pageURL.ResolveReference(ref)
			name, ok := strings.CutPrefix(target.Path, "/runbooks/")
			if !ok || name == p.Name {
				t.Errorf("%s: link %q resolves to %s", p.Name, m[1], target.Path)
				continue
			}
			if _, ok := b.Markdown(name); !ok {
				t.Errorf("%s: link %q points at a page that does not exist", p.Name, m[1])
			}
		}
	}
}

func TestServeHTTPEdges(t *testing.T) {
	b := newTestBook(t)
	srv := httptest.NewServer(b)
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	for _, tc := range []struct {
		path, location string
	}{
		{"/runbooks", "/runbooks/"},
		{"/runbooks/triage/", "/runbooks/triage"},
	} {
		resp, err := client.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != tc.location {
			t.Errorf("%s: status %d, Location %q, want 301 to %s", tc.path, resp.StatusCode, resp.Header.Get("Location"), tc.location)
		}
	}

	for _, path := range []string{"/runbooks/%3Cscript%3Ealert(1)%3C%2Fscript%3E", "/runbooks/triage/extra", "/runbooks/TRIAGE", "/runbooks/no_such_class"} {
		resp, body := get(t, srv.URL+path)
		if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || strings.Contains(body, "<") {
			t.Errorf("%s: status %d, content type %q, body %q", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
	}

	resp, err := http.Post(srv.URL+"/runbooks/triage", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d", resp.StatusCode)
	}
}

func TestRenderingDoesNotPassMarkupThrough(t *testing.T) {
	b, err := newBook(detect.DefaultConfig(), fstest.MapFS{
		"evil.md": {Data: []byte("---\nseverities: [warning]\n---\n# Title <b>bold</b> & co\n\nSummary with <script>alert(1)</script> in it.\n\n" +
			"<script>alert(2)</script>\n\n[click](javascript:alert(3))\n\n## How the watchdog decided\n\nIt did.\n")},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(b)
	defer srv.Close()
	for _, path := range []string{"/runbooks/", "/runbooks/evil"} {
		_, body := get(t, srv.URL+path)
		for _, bad := range []string{"<script", "javascript:", "<b>"} {
			if strings.Contains(body, bad) {
				t.Errorf("%s: %q passed through:\n%s", path, bad, body)
			}
		}
	}
	if !b.Has("evil") || b.Pages()[0].Title != "Title bold & co" { // inline raw HTML is dropped, as in the body
		t.Errorf("page = %+v", b.Pages())
	}
}

func TestNewRejectsMalformedPages(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"no title":                      {"a.md": {Data: []byte("Some text.\n\n## Section\n")}},
		"no summary":                    {"a.md": {Data: []byte("# Title\n\n## Section\n")}},
		"bad name":                      {"Bad-Name.md": {Data: []byte("# Title\n\nSummary.\n")}},
		"class page without severities": {"a.md": {Data: []byte("# Title\n\nSummary.\n\n## How the watchdog decided\n\nIt did.\n")}},
		"guide with severities":         {"a.md": {Data: []byte("---\nseverities: [warning]\n---\n# Title\n\nSummary.\n")}},
		"unknown severity":              {"a.md": {Data: []byte("---\nseverities: [page]\n---\n# Title\n\nSummary.\n\n## How the watchdog decided\n\nIt did.\n")}},
		"severity given twice":          {"a.md": {Data: []byte("---\nseverities: [warning, warning]\n---\n# Title\n\nSummary.\n\n## How the watchdog decided\n\nIt did.\n")}},
		"unknown front matter key":      {"a.md": {Data: []byte("---\nseverity: [warning]\n---\n# Title\n\nSummary.\n\n## How the watchdog decided\n\nIt did.\n")}},
		"unclosed front matter":         {"a.md": {Data: []byte("---\nseverities: [warning]\n# Title\n\nSummary.\n")}},
		"unknown setting":               {"a.md": {Data: []byte("# Title\n\nSummary {{setting \"detectors.preempt_storm.no_such_key\"}}.\n")}},
		"unknown key":                   {"a.md": {Data: []byte("# Title\n\nSummary {{key \"detectors.no_such_detector.range\"}}.\n")}},
		"setting that is no fraction":   {"a.md": {Data: []byte("# Title\n\nSummary {{percent \"detectors.preempt_storm.range\"}}.\n")}},
		"broken template":               {"a.md": {Data: []byte("# Title\n\nSummary {{setting.\n")}},
	} {
		if _, err := newBook(detect.DefaultConfig(), fsys); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A page kept outside the embedded set (a detector's own) is served, and
// the on-call workflow lists it until someone writes it into the list.
func TestExtraPagesAreServedAndTheWorkflowReachesThem(t *testing.T) {
	extra := fstest.MapFS{"made_up_class.md": {Data: []byte("---\nseverities: [warning]\n---\n# Made-up class\n\nSomething made up happens.\n\n" +
		"**Severity:** warning.\n\n## How the watchdog decided\n\nIt did.\n")}}
	b, err := New(detect.DefaultConfig(), extra)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Has("made_up_class") {
		t.Fatalf("classes %v", b.Classes())
	}
	srv := httptest.NewServer(b)
	defer srv.Close()
	if resp, page := get(t, srv.URL+"/runbooks/made_up_class"); resp.StatusCode != http.StatusOK || !strings.Contains(page, "Something made up happens.") {
		t.Errorf("status %d:\n%s", resp.StatusCode, page)
	}
	src, _ := b.Markdown("triage")
	which := parseOutline([]byte(src)).body["Which page when"]
	if !strings.Contains(which, "\n- [Made-up class](made_up_class): Something made up happens.") {
		t.Errorf("the on-call workflow does not list the new class:\n%s", which)
	}
	// The classes it links already are not listed again.
	if strings.Count(src, "](preempt_storm)") != strings.Count(string(mustRead(t, "pages/triage.md")), "](preempt_storm)") {
		t.Error("the workflow lists a class it links already")
	}
	// A page given twice, in the embedded set and beside it, is refused.
	if _, err := New(detect.DefaultConfig(), fstest.MapFS{"triage.md": {Data: []byte("# Triage\n\nAgain.\n")}}); err == nil || !strings.Contains(err.Error(), "given twice") {
		t.Errorf("a second triage.md: %v", err)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := embedded.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
