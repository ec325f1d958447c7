//go:build browser

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// The real-browser tests are built with -tags browser (.ci/browser.sh
// runs them), so the plain test run does not wait a minute and a half for
// a live incident twice.

// browserPath is the Chromium the real-browser tests drive
// (WATCHDOG_BROWSER). Without one they skip, except in CI (CI=true),
// where a missing browser is a failure: .ci/browser.sh installs it.
func browserPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("WATCHDOG_BROWSER")
	if p == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but WATCHDOG_BROWSER is not set: run the browser tests through .ci/browser.sh, which installs chromium")
		}
		t.Skip("real-browser test skipped: set WATCHDOG_BROWSER to a Chromium binary (e.g. /usr/bin/chromium) to run it")
	}
	return p
}

// screenshotDir is where screenshots go: WATCHDOG_SCREENSHOTS, else the
// test's temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("WATCHDOG_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// browser is a headless Chromium tab that collects every console error,
// uncaught exception and error log entry (a CSP violation, a failed load).
type browser struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browserPath(t)), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{ctx: ctx}
	// Listen starts the browser: it runs on ctx, which has no deadline.
	err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value))
				}
				b.errors = append(b.errors, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *runtime.EventExceptionThrown:
			b.errors = append(b.errors, "exception: "+(&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError || ev.Entry.Level == cdplog.EntryLevelWarning {
				b.errors = append(b.errors, fmt.Sprintf("log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatalf("start %s: %v", browserPath(t), err)
	}
	for _, enable := range []cdp.Command[cdp.Empty, cdp.Empty]{cdplog.Enable, runtime.Enable} {
		if _, err := chromedp.Call(ctx, enable, cdp.Empty{}); err != nil {
			t.Fatalf("enable %s: %v", enable.Method, err)
		}
	}
	return b
}

// run runs the steps, each page's work bounded by a timeout.
func (b *browser) run(t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one action and returns its value.
func value[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// count is the number of elements matching a CSS selector.
func (b *browser) count(t *testing.T, selector string) int {
	t.Helper()
	return value(t, b, "count "+selector, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", selector)))
}

func (b *browser) checkClean(t *testing.T, page string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errors {
		t.Errorf("%s: %s", page, e)
	}
	b.errors = nil
}

func (b *browser) screenshot(t *testing.T, dir, name string) {
	t.Helper()
	b.save(t, dir, name, value(t, b, "screenshot "+name, chromedp.CaptureScreenshot()))
}

// screenshotOf captures one element whole, beyond the viewport.
func (b *browser) screenshotOf(t *testing.T, dir, name, selector string) {
	t.Helper()
	b.save(t, dir, name, value(t, b, "screenshot "+name, chromedp.Screenshot(chromedp.CSS(selector))))
}

func (b *browser) save(t *testing.T, dir, name string, png []byte) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", path, len(png))
}

// signalCounts are an incident's moving signals and those of them with a
// numeric limit.
func signalCounts(r incident.Record) (limits, moving int) {
	for _, s := range r.Signals {
		if !s.Constant() {
			moving++
			if s.HasLimit {
				limits++
			}
		}
	}
	return limits, moving
}

// TestWorkspaceInARealBrowser loads the workspace of a daemon watching a
// simulated fleet with a live preempt storm: the fleet page, then, by
// clicking, the incident and the replica page.
func TestWorkspaceInARealBrowser(t *testing.T) {
	b := newBrowser(t)
	shots := screenshotDir(t)
	t.Logf("screenshots go to %s", shots)

	d := startLiveDaemon(t, stormAfter(30*time.Second), nil)
	rec := d.waitFiring(t, detect.PreemptStorm, "sim-0", 3*time.Minute)

	// The fleet page: every replica, the storm's replica first, one
	// sparkline each.
	b.run(t, "load /", chromedp.Navigate(d.URL+"/"), chromedp.WaitVisible(chromedp.CSS("table.fleet")))
	if n := b.count(t, "tr.replica"); n != 3 {
		t.Errorf("fleet page lists %d replicas, want 3", n)
	}
	if n := b.count(t, "tr.replica svg.spark"); n != 3 {
		t.Errorf("%d sparklines, want 3", n)
	}
	first := value(t, b, "first row", chromedp.Text(chromedp.CSS("tr.replica th a")))
	if first != "sim-0" {
		t.Errorf("first replica %q, want sim-0 (firing)", first)
	}
	b.screenshot(t, shots, "fleet-page.png")
	b.checkClean(t, "fleet page")

	// Click through to the incident.
	b.run(t, "open the incident", chromedp.Click(chromedp.CSS("li.incident.firing a")), chromedp.WaitVisible(chromedp.CSS("figure.plot")))
	loc := value(t, b, "location", chromedp.Location())
	if !strings.HasSuffix(loc, "/incidents/"+rec.ID) {
		t.Errorf("incident link went to %s, want /incidents/%s", loc, rec.ID)
	}
	// The incident goes on while the page is read: compare the page with
	// the journal only when the journal read before the page was drawn
	// and the one after it count the same signals.
	shown := d.Incident(t, rec.ID)
	limits, moving := signalCounts(shown)
	for range 5 {
		b.run(t, "reload the incident", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("figure.plot")))
		after := d.Incident(t, rec.ID)
		l, m := signalCounts(after)
		same := l == limits && m == moving && len(after.Signals) == len(shown.Signals) && len(after.Impact) == len(shown.Impact)
		shown, limits, moving = after, l, m
		if same {
			break
		}
	}
	if len(shown.Signals) == 0 || limits == 0 {
		t.Fatalf("the journal recorded %d signals for %s, %d moving with a numeric limit; want the storm's evidence with its thresholds", len(shown.Signals), rec.ID, limits)
	}
	t.Logf("%d signals, %d moving, %d of them with a numeric limit", len(shown.Signals), moving, limits)
	// The signals that decided the finding lead, large; the other moving
	// ones are folded; the constants are facts.
	decisive := b.count(t, "#decisive-plots figure.plot.lead")
	if decisive == 0 || decisive > 3 {
		t.Errorf("%d decisive plots, want 1 to 3", decisive)
	}
	if n := b.count(t, "#decisive-plots figure.plot figcaption .rule"); n != decisive {
		t.Errorf("%d of %d decisive plots state their rule", n, decisive)
	}
	if n := decisive + b.count(t, "#evidence-plots figure.plot"); n != moving {
		t.Errorf("%d evidence plots, want one per moving signal (%d)", n, moving)
	}
	if n := b.count(t, "#evidence-facts dt"); n != len(shown.Signals)-moving {
		t.Errorf("%d evidence facts, want one per constant signal (%d)", n, len(shown.Signals)-moving)
	}
	if n := b.count(t, "#decisive-plots svg path.series, #evidence-plots svg path.series"); n != moving {
		t.Errorf("%d value lines, want %d", n, moving)
	}
	if n := b.count(t, "#decisive-plots svg .threshold, #evidence-plots svg .threshold"); n != limits {
		t.Errorf("%d threshold lines, want %d (moving signals with a limit)", n, limits)
	}
	if n := b.count(t, "#impact-plots figure.plot") + b.count(t, "#impact-facts dt"); n != len(shown.Impact) {
		t.Errorf("%d impact plots and facts, want %d", n, len(shown.Impact))
	}
	if n := b.count(t, "#decisive-plots svg line.marker"); n < decisive {
		t.Errorf("%d onset/fire markers over %d plots", n, decisive)
	}
	if open := value(t, b, "folded", chromedp.Evaluate[bool](`!!document.querySelector("details.more[open]")`)); open {
		t.Errorf("the other signals are not folded")
	}
	// Large enough to read: the first plot spans the page and its axis
	// labels are set at about the page's own text size.
	size := value(t, b, "plot size", chromedp.Evaluate[[]float64](`(() => {
		const svg = document.querySelector("#decisive-plots svg"), tick = svg.querySelector("text.tick");
		return [svg.getBoundingClientRect().width / document.querySelector("main").clientWidth, tick.getBoundingClientRect().height];
	})()`))
	if size[0] < 0.9 || size[1] < 13 {
		t.Errorf("the first decisive plot spans %.0f%% of the page with %.1f px tick labels; want the page's width and >= 13 px", 100*size[0], size[1])
	}
	if n := b.count(t, `a[href^="/silences/new?"]`); n != 1 {
		t.Errorf("%d Silence links, want 1", n)
	}
	b.screenshot(t, shots, "incident-page.png")
	b.screenshotOf(t, shots, "incident-evidence.png", `section[aria-labelledby="evidence-h"]`)
	b.checkClean(t, "incident page")

	// And on to the replica.
	b.run(t, "open the replica", chromedp.Click(chromedp.CSS(`a[href="/replicas/sim-0"]`)), chromedp.WaitVisible(chromedp.CSS("#series-h")))
	loc = value(t, b, "location", chromedp.Location())
	if !strings.HasSuffix(loc, "/replicas/sim-0") {
		t.Errorf("replica link went to %s", loc)
	}
	if n := b.count(t, "figure.plot"); n != 7 {
		t.Errorf("replica page has %d plots, want 7", n)
	}
	if n := b.count(t, "figure.plot svg path.series"); n != 7 {
		t.Errorf("replica page draws %d series, want 7", n)
	}
	if n := b.count(t, "#findings-h + ul li"); n == 0 {
		t.Errorf("the replica page lists none of the round's findings on sim-0")
	}
	b.screenshot(t, shots, "replica-page.png")
	b.checkClean(t, "replica page")
}

// TestSilenceFromTheWorkspaceInARealBrowser silences a pending preempt
// storm from its incident page, in the browser, as on-call would during
// planned work: when the incident fires nothing is sent, and when the
// silence is expired from the silences page while it still fires, the
// page goes out.
//
// It runs behind an Ingress-like proxy that forwards only /watchdog/...
// (keeping the Host), with --web.external-url at that path: every link,
// stylesheet, form and redirect must stay under the prefix, or the
// proxy's 404 breaks the flow and the browser logs the failed load.
func TestSilenceFromTheWorkspaceInARealBrowser(t *testing.T) {
	b := newBrowser(t)
	shots := screenshotDir(t)
	const token = "workspace-test-token"
	const prefix = "/watchdog"
	ingress := newIngress(t, prefix)
	d := startLiveDaemon(t, stormAfter(20*time.Second), func(cfg *config.Config) {
		// Pending long enough for a browser to fill a form.
		cfg.Alerts.For = 45 * time.Second
		cfg.API.TokenFile = filepath.Join(t.TempDir(), "api-token")
		cfg.API.Token = token
		cfg.ExternalURL = ingress.URL + prefix + "/"
	})
	ingress.forwardTo(t, d.URL)
	d.URL = ingress.URL + prefix
	rec := d.waitIncident(t, "pending", detect.PreemptStorm, "sim-0", 2*time.Minute)

	// The fleet page: its stylesheet loads under the prefix (the header
	// is laid out by it), and every URL on it stays under the prefix.
	b.run(t, "load the fleet page", chromedp.Navigate(d.URL+"/"), chromedp.WaitVisible(chromedp.CSS("table.fleet")))
	if pos := value(t, b, "header layout", chromedp.Evaluate[string](`getComputedStyle(document.querySelector("header nav")).display`)); pos == "inline" {
		t.Errorf("the header nav is laid out %q: the stylesheet did not load under %s", pos, prefix)
	}
	b.checkURLsUnder(t, "fleet page", prefix+"/")
	b.checkClean(t, "fleet page under "+prefix)

	b.run(t, "open the pending incident", chromedp.Navigate(d.URL+"/incidents/"+rec.ID),
		chromedp.WaitVisible(chromedp.CSS(`a[href^="`+prefix+`/silences/new?"]`)))
	b.checkURLsUnder(t, "incident page", prefix+"/")
	b.run(t, "open the silence form", chromedp.Click(chromedp.CSS(`a[href^="`+prefix+`/silences/new?"]`)),
		chromedp.WaitVisible(chromedp.CSS("#token")))
	b.checkURLsUnder(t, "silence form", prefix+"/")
	for field, want := range map[string]string{"#m-incident": rec.ID, "#m-replica": "sim-0", "#m-class": "", "#m-severity": ""} {
		if got := value(t, b, "field "+field, chromedp.Value(chromedp.CSS(field))); got != want {
			t.Errorf("silence form %s = %q, want %q (prefilled from the incident)", field, got, want)
		}
	}
	b.run(t, "create the silence",
		chromedp.SendKeys(chromedp.CSS("#created_by"), "on-call"),
		chromedp.SendKeys(chromedp.CSS("#comment"), "KV pool resize on sim-0"),
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[id^="silence-"]`)))
	if loc := value(t, b, "location", chromedp.Location()); loc != d.URL+"/silences" {
		t.Errorf("creating the silence went to %s, want %s/silences", loc, d.URL)
	}
	b.checkURLsUnder(t, "silences page", prefix+"/")
	if state := value(t, b, "silence state", chromedp.Text(chromedp.CSS(`tr[id^="silence-"] td`))); state != "active" {
		t.Errorf("the new silence is %q, want active", state)
	}
	b.screenshot(t, shots, "silences-page.png")
	b.checkClean(t, "silences page")

	// It fires while silenced: tracked, shown as silenced, nothing sent,
	// even when aborts join and it is renamed after them.
	var fired incident.Record
	eventually(t, 2*time.Minute, "the silenced incident firing", func() bool {
		fired = d.Incident(t, rec.ID)
		return fired.State == alert.StateFiring
	})
	t.Logf("incident %s fires as %s (chain %v)", fired.ID, fired.Class, fired.Chain)
	if len(fired.SilencedBy) == 0 {
		t.Errorf("incident %s fires without silenced_by", fired.ID)
	}
	eventually(t, time.Minute, `watchdog_notifications_silenced_total{kind="trigger"} counting the storm's held trigger`,
		func() bool { return d.silencedTriggers(t) > 0 })
	if sent := d.sentFor(fired.Fingerprint); len(sent) != 0 {
		t.Fatalf("the silenced storm was sent: %v", sent)
	}

	// Expire it from the UI: the storm still fires, so the page goes out.
	b.run(t, "expire the silence", chromedp.Navigate(d.URL+"/silences"),
		chromedp.SendKeys(chromedp.CSS(`tr[id^="silence-"] input[name="token"]`), token),
		chromedp.Click(chromedp.CSS(`tr[id^="silence-"] button[type="submit"]`)),
		// The list as the redirect renders it: an expired silence has no
		// expire form (the old page's row would match at once).
		chromedp.WaitNotPresent(chromedp.CSS(`tr[id^="silence-"] form`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[id^="silence-"]`)))
	if state := value(t, b, "silence state", chromedp.Text(chromedp.CSS(`tr[id^="silence-"] td`))); state != "expired" {
		t.Errorf("the silence is %q after expiring it, want expired", state)
	}
	b.checkClean(t, "silences page after expiring")
	eventually(t, time.Minute, "a notification of the storm, still firing, after its silence was expired",
		func() bool { return len(d.sentFor(fired.Fingerprint)) > 0 })
	if first := d.sentFor(fired.Fingerprint)[0]; first.ev.Kind != notify.KindTrigger {
		t.Errorf("first notification after the silence is a %s, want a trigger", first.ev.Kind)
	}
}

// checkURLsUnder fails for every link, stylesheet, image or form action on
// the page that leads to this site outside prefix (same-page anchors and
// other sites aside).
func (b *browser) checkURLsUnder(t *testing.T, page, prefix string) {
	t.Helper()
	outside := value(t, b, "URLs on "+page, chromedp.Evaluate[[]string](fmt.Sprintf(`(() => {
		const out = [];
		for (const el of document.querySelectorAll("[href], [src], form[action]")) {
			const raw = el.getAttribute("href") ?? el.getAttribute("src") ?? el.getAttribute("action");
			if (raw.startsWith("#")) continue;
			const u = new URL(raw, location.href);
			if (u.origin === location.origin && !u.pathname.startsWith(%q)) out.push(el.tagName + " " + raw);
		}
		return out;
	})()`, prefix)))
	for _, u := range outside {
		t.Errorf("%s: %s is outside %s", page, u, prefix)
	}
}

// ingress forwards what is under its prefix to the daemon as an Ingress
// with a path rule does (the Host kept, the path unchanged), and answers
// 404 to everything else.
type ingress struct {
	URL    string
	target atomic.Pointer[url.URL]
}

func newIngress(t *testing.T, prefix string) *ingress {
	t.Helper()
	in := &ingress{}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(in.target.Load())
		r.Out.Host = r.In.Host
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if in.target.Load() == nil || !strings.HasPrefix(r.URL.Path, prefix+"/") {
			http.NotFound(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	in.URL = srv.URL
	return in
}

func (in *ingress) forwardTo(t *testing.T, daemon string) {
	t.Helper()
	u, err := url.Parse(daemon)
	if err != nil {
		t.Fatal(err)
	}
	in.target.Store(u)
}
