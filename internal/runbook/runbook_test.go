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
)

// incidentClasses is every class the watchdog pages for; each must have a
// page with the class structure.
var incidentClasses = []string{
	"cache_collapse",
	"cold_start",
	"decode_slowdown",
	"engine_hang",
	"error_rate",
	"fleet",
	"kv_saturation",
	"lora_thrash",
	"metrics_blind",
	"pd_transfer_failure",
	"preempt_storm",
	"queue_latency",
	"replica_down",
	"replica_restarted",
	"retry_avalanche",
}

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

// realMetrics are the sglang: families of the reference (sglang-metrics.md
// §3, including the renamed and removed names old releases still expose),
// without the phantom names (§3.4 total_retracted_reqs, the never-written
// avg_request_queue_latency) and the tutorial names of §9.
var realMetrics = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(`
		num_running_reqs num_queue_reqs num_grammar_queue_reqs num_running_reqs_offline_batch
		gen_throughput cache_hit_rate decode_sum_seq_lens token_usage full_token_usage
		swa_token_usage mamba_usage num_used_tokens kv_available_tokens kv_evictable_tokens
		kv_used_tokens swa_available_tokens swa_evictable_tokens swa_used_tokens
		mamba_available_tokens mamba_evictable_tokens mamba_used_tokens
		weight_load_duration_seconds spec_accept_length spec_accept_rate spec_cap_length
		spec_block_accept_length spec_num_steps spec_num_draft_tokens num_retracted_reqs
		num_retracted_requests_total num_retracted_input_tokens_total
		num_retracted_output_tokens_total num_paused_reqs num_prefill_bootstrap_queue_reqs
		num_prefill_prealloc_queue_reqs num_prefill_inflight_queue_reqs
		num_decode_prealloc_queue_reqs num_decode_transfer_queue_reqs
		pending_prealloc_token_usage num_bootstrap_failed_reqs_total
		num_transfer_failed_reqs_total num_prefill_retries_total kv_transfer_speed_gb_s
		kv_transfer_latency_ms kv_transfer_bootstrap_ms kv_transfer_alloc_ms
		kv_transfer_total_mb utilization fwd_occupancy new_token_ratio is_cuda_graph
		cuda_graph_passes_total lora_pool_slots_used lora_pool_slots_total
		lora_pool_utilization hicache_host_used_tokens hicache_host_total_tokens
		num_streaming_sessions streaming_session_held_tokens
		num_unique_running_routing_keys routing_key_running_req_count
		routing_key_all_req_count queue_time_seconds per_stage_req_latency_seconds
		grammar_compilation_time_seconds grammar_schema_count grammar_ebnf_size
		grammar_tree_traversal_time_avg grammar_tree_traversal_time_max
		num_grammar_cache_hit_total num_grammar_aborted_total num_grammar_timeout_total
		num_grammar_total eplb_balancedness realtime_tokens_total
		prefill_effective_tokens_total forward_execution_seconds_total
		dp_cooperation_realtime_tokens_total dp_cooperation_forward_execution_seconds_total
		estimated_flops_per_gpu_total estimated_read_bytes_per_gpu_total
		estimated_write_bytes_per_gpu_total prefill_delayer_wait_forward_passes
		prefill_delayer_wait_seconds prefill_delayer_outcomes_total max_total_num_tokens
		max_total_num_tokens_swa weight_memory_usage_gb kv_cache_memory_usage_gb
		graph_memory_usage_gb max_running_requests_under_SLO page_size num_pages
		context_len startup_available_gpu_memory_gb engine_startup_time
		engine_load_weights_time

		prompt_tokens_total generation_tokens_total cached_tokens_total num_requests_total
		num_so_requests_total num_aborted_requests_total time_to_first_token_seconds
		inter_token_latency_seconds e2e_request_latency_seconds prompt_tokens_histogram
		generation_tokens_histogram uncached_prompt_tokens_histogram num_retractions
		spec_verify_calls_total get_loads_duration_seconds startup_time_seconds
		startup_cuda_graph_time_seconds

		http_requests_total http_responses_total http_requests_active routing_keys_active
		func_latency_seconds process_cpu_seconds_total evicted_tokens_total
		eviction_duration_seconds load_back_tokens_total load_back_duration_seconds
		load_back_bytes_total hicache_backup_tokens_total hicache_backup_duration_seconds
		hicache_backup_bytes_total hicache_dropped_tokens_total prefetched_tokens_total
		backuped_tokens_total prefetch_pgs backup_pgs prefetch_bandwidth backup_bandwidth
		hicache_prefetch_outcomes_total hicache_backup_dropped_tokens_total
		hicache_prefetch_aux_alloc_failed_tokens_total eplb_gpu_physical_count
		encoder_cache_evictions_total encoder_cache_size_mb encoder_cache_entries
		encoder_cache_hit_tokens_total encoder_cache_total_tokens_total
		encoder_cache_hit_files_total encoder_cache_total_files_total encoder_requests_total
		encoder_requests_received_total encoder_mm_items_per_batch
		encoder_mm_items_per_request encoder_request_e2e_latency_seconds
		encoder_queue_wait_seconds encoder_preprocess_seconds encoder_model_forward_seconds
		encoder_transfer_seconds

		num_requests_running num_requests_waiting queue_req new_seq new_token cached_token
		max_prefill_tokens max_running_requests request_prompt_tokens
		request_generation_tokens request_success_total waiting_request_latency_seconds
		time_per_output_token_seconds cache_config_info gpu_execution_seconds_total
		dp_cooperation_gpu_execution_seconds_total gpu_overlap_wait_seconds_total
		prefetch_occupied_ratio
	`) {
		m["sglang:"+n] = true
	}
	return m
}()

func newTestBook(t *testing.T) *Book {
	t.Helper()
	b, err := New()
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
		if !strings.Contains(o.header, "**Layer:**") || !strings.Contains(o.header, "**Default severity:**") {
			t.Errorf("%s: the header must give the layer and the default severity; got %q", class, o.header)
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

var sglangName = regexp.MustCompile(`sglang:[A-Za-z0-9_]+`)

func TestEverySGLangMetricInAPageIsReal(t *testing.T) {
	b := newTestBook(t)
	for _, p := range b.Pages() {
		src, _ := b.Markdown(p.Name)
		for _, name := range sglangName.FindAllString(src, -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(name, suffix); ok && realMetrics[s] {
					base = s
				}
			}
			if !realMetrics[base] {
				t.Errorf("%s mentions %s, which is not in the reference", p.Name, name)
			}
		}
	}
	for _, name := range deniedMetrics {
		if realMetrics["sglang:"+name] {
			t.Errorf("allowlist contains the denied %s", name)
		}
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
	b, err := newBook(fstest.MapFS{
		"evil.md": {Data: []byte("# Title <b>bold</b> & co\n\nSummary with <script>alert(1)</script> in it.\n\n" +
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
		"no title":   {"a.md": {Data: []byte("Some text.\n\n## Section\n")}},
		"no summary": {"a.md": {Data: []byte("# Title\n\n## Section\n")}},
		"bad name":   {"Bad-Name.md": {Data: []byte("# Title\n\nSummary.\n")}},
	} {
		if _, err := newBook(fsys); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
