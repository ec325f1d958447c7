package silence

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

const testToken = "s3cret-token-value"

type apiWorld struct {
	srv   *httptest.Server
	store *Store
	logs  *observer.ObservedLogs
	now   time.Time
}

func newAPI(t *testing.T, token string, standby bool) *apiWorld {
	t.Helper()
	store, _ := newStore(t, nil)
	core, logs := observer.New(zap.DebugLevel)
	w := &apiWorld{store: store, logs: logs, now: t0}
	h := NewHandler(HandlerOptions{Store: store, Token: token, Standby: func() bool { return standby },
		Now: func() time.Time { return w.now }, Logger: zap.New(core)})
	w.srv = httptest.NewServer(h)
	t.Cleanup(w.srv.Close)
	return w
}

func (w *apiWorld) client(token string) *Client {
	return &Client{BaseURL: w.srv.URL, Token: token, HTTP: w.srv.Client()}
}

func (w *apiWorld) noTokenInLogs(t *testing.T) {
	t.Helper()
	for _, e := range w.logs.All() {
		line, _ := json.Marshal(e.ContextMap())
		if strings.Contains(e.Message+string(line), testToken) {
			t.Errorf("token logged: %s %s", e.Message, line)
		}
	}
}

func validRequest() Request {
	return Request{Matchers: []string{`replica="sim-0"`, `class=~"preempt.*"`}, EndsAt: t0.Add(2 * time.Hour), CreatedBy: "ana", Comment: "draining for a kernel upgrade"}
}

func TestAPICreateGetListExpire(t *testing.T) {
	w := newAPI(t, testToken, false)
	c := w.client(testToken)
	ctx := context.Background()
	st, err := c.Add(ctx, validRequest())
	if err != nil {
		t.Fatal(err)
	}
	if st.ID == "" || st.State != StateActive || !st.StartsAt.Equal(t0) {
		t.Fatalf("created %+v", st)
	}
	resp, err := w.srv.Client().Get(w.srv.URL + "/api/v1/silences/" + st.ID)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET one: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	if ids := w.store.Mutes(map[string]string{"replica": "sim-0", "class": "preempt_storm"}, t0); len(ids) != 1 {
		t.Fatalf("created silence does not mute: %v", ids)
	}
	w.now = t0.Add(time.Minute)
	exp, err := c.Expire(ctx, st.ID)
	if err != nil || exp.State != StateExpired || !exp.EndsAt.Equal(w.now) {
		t.Fatalf("expire: %+v %v", exp, err)
	}
	list, err := c.List(ctx)
	if err != nil || len(list) != 1 || list[0].State != StateExpired {
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := c.Expire(ctx, st.ID); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("expiring twice: %v", err)
	}
	if _, err := c.Expire(ctx, "no-such-id"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("expiring unknown: %v", err)
	}
	w.noTokenInLogs(t)
}

func TestAPIRefusals(t *testing.T) {
	ctx := context.Background()
	off := newAPI(t, "", false)
	if _, err := off.client("anything").Add(ctx, validRequest()); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "api.token_file") {
		t.Errorf("no token configured: %v, want 403 saying how to enable", err)
	}
	if _, err := off.client("").List(ctx); err != nil {
		t.Errorf("reads need no token: %v", err)
	}

	w := newAPI(t, testToken, false)
	_, err := w.client("wrong").Add(ctx, validRequest())
	if err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), testToken) {
		t.Errorf("wrong token: %v, want 401 without the token", err)
	}
	if _, err := w.client("").Expire(ctx, "x"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("no token: %v", err)
	}

	// A page on another site posting with the operator's browser.
	req, _ := http.NewRequest(http.MethodPost, w.srv.URL+"/api/v1/silences", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := w.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST: %s, want 403", resp.Status)
	}

	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"bad matcher", Request{Matchers: []string{`replica=~"(("`}, EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, `matchers[0]: "replica=~\"((\"" is not a matcher`},
		{"end before start", Request{Matchers: []string{`replica="x"`}, StartsAt: t0.Add(2 * time.Hour), EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, "is not after starts_at"},
	} {
		_, err := w.client(testToken).Add(ctx, tc.req)
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want 400 saying %q", tc.name, err, tc.want)
		}
	}
	resp, err = w.srv.Client().Do(bearerPost(w.srv.URL+"/api/v1/silences", `{"matchers":["replica=\"x\""],"until":"tomorrow"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "unknown field") {
		t.Errorf("unknown field: %s %s", resp.Status, body)
	}

	standby := newAPI(t, testToken, true)
	if _, err := standby.client(testToken).Add(ctx, validRequest()); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "follower") {
		t.Errorf("standby: %v, want 503", err)
	}
	w.noTokenInLogs(t)
}

func bearerPost(u, body string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	return req
}

func TestFormCreatesPrefilledSilenceAndExpiresIt(t *testing.T) {
	w := newAPI(t, testToken, false)
	noRedirect := *w.srv.Client()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	resp, err := noRedirect.Get(w.srv.URL + "/silences/new?replica=sim-0&class=preempt_storm")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "form-action 'self'") {
		t.Errorf("form page Content-Security-Policy %q: want no scripts and forms posting only to the daemon", csp)
	}
	for _, want := range []string{`<label for="m-replica">`, `id="m-replica" name="replica" value="sim-0"`, `value="preempt_storm"`, `type="password"`, `<label for="token">`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("form lacks %s", want)
		}
	}

	form := url.Values{"replica": {"sim-0"}, "class": {"preempt_storm"}, "duration": {"1h"}, "created_by": {"ana"}, "comment": {"upgrade"}, "token": {"wrong"}}
	resp, err = noRedirect.PostForm(w.srv.URL+"/silences/new", form)
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(page), "wrong\"") || !strings.Contains(string(page), `value="sim-0"`) {
		t.Errorf("wrong token: %s, want 401 with the form refilled and the token not echoed", resp.Status)
	}

	form.Set("token", testToken)
	resp, err = noRedirect.PostForm(w.srv.URL+"/silences/new", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/silences" {
		t.Fatalf("create: %s to %q, want 303 to /silences", resp.Status, resp.Header.Get("Location"))
	}
	list := w.store.List(t0)
	if len(list) != 1 || !list[0].EndsAt.Equal(t0.Add(time.Hour)) || strings.Join(list[0].Matchers, ",") != `replica="sim-0",class="preempt_storm"` {
		t.Fatalf("stored %+v", list)
	}

	resp, err = noRedirect.Get(w.srv.URL + "/silences")
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `action="/silences/`+list[0].ID+`/expire"`) {
		t.Fatalf("list page has no expire button for the active silence:\n%s", page)
	}
	resp, err = noRedirect.PostForm(w.srv.URL+"/silences/"+list[0].ID+"/expire", url.Values{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("expire: %s", resp.Status)
	}
	if st, _ := w.store.Get(list[0].ID, t0); st.State != StateExpired {
		t.Errorf("after expire: %s", st.State)
	}

	// Cross-origin form posts are refused.
	req, _ := http.NewRequest(http.MethodPost, w.srv.URL+"/silences/new", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	resp, err = noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin form post: %s, want 403", resp.Status)
	}
	w.noTokenInLogs(t)
}

// TestPagesUnderAPathPrefix: behind an Ingress path the pages' links,
// form actions and redirects carry the prefix the browser sees.
func TestPagesUnderAPathPrefix(t *testing.T) {
	store, _ := newStore(t, nil)
	h := NewHandler(HandlerOptions{Store: store, Token: testToken, Now: func() time.Time { return t0 }, PathPrefix: "/watchdog"})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client := srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

	resp, err := client.Get(srv.URL + "/silences/new?replica=sim-0")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`<a href="/watchdog/" class="brand">`, `<a href="/watchdog/silences">`, `<a href="/watchdog/silences/new">`,
		`action="/watchdog/silences/new"`, `href="/watchdog/ui/style.css"`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("form page lacks %s", want)
		}
	}
	resp, err = client.PostForm(srv.URL+"/silences/new", url.Values{"replica": {"sim-0"}, "duration": {"1h"}, "created_by": {"ana"}, "token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/watchdog/silences" {
		t.Fatalf("create: %s to %q, want 303 to /watchdog/silences", resp.Status, resp.Header.Get("Location"))
	}
	id := store.List(t0)[0].ID
	resp, err = client.Get(srv.URL + "/silences")
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `action="/watchdog/silences/`+id+`/expire"`) {
		t.Errorf("list page's expire form is not under the prefix:\n%s", page)
	}
	resp, err = client.PostForm(srv.URL+"/silences/"+id+"/expire", url.Values{"token": {testToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/watchdog/silences" {
		t.Errorf("expire: %s to %q, want 303 to /watchdog/silences", resp.Status, resp.Header.Get("Location"))
	}
}
