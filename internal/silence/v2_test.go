package silence

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
)

// v2Call sends one request to the v2 API with token as the bearer token
// ("" none) and returns the status and body.
func (w *apiWorld) v2Call(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, w.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := w.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// postableJSON is a silence as amtool posts it.
func postableJSON(t *testing.T, start, end time.Time, matchers ...*models.Matcher) string {
	t.Helper()
	ps := models.PostableSilence{Silence: models.Silence{
		Matchers: matchers, StartsAt: ptr(strfmt.DateTime(start)), EndsAt: ptr(strfmt.DateTime(end)),
		CreatedBy: ptr("ana"), Comment: ptr("kernel upgrade"),
	}}
	b, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func matcher(name, value string, isRegex, isEqual bool) *models.Matcher {
	return &models.Matcher{Name: &name, Value: &value, IsRegex: &isRegex, IsEqual: &isEqual}
}

func (w *apiWorld) v2Post(t *testing.T, body string) string {
	t.Helper()
	code, resp := w.v2Call(t, http.MethodPost, "/api/v2/silences", testToken, body)
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(resp), &out) != nil || out.SilenceID == "" {
		t.Fatalf("POST /api/v2/silences: %d %s, want 200 with a silenceID", code, resp)
	}
	return out.SilenceID
}

func (w *apiWorld) v2List(t *testing.T, query string) models.GettableSilences {
	t.Helper()
	code, body := w.v2Call(t, http.MethodGet, "/api/v2/silences"+query, "", "")
	if code != http.StatusOK {
		t.Fatalf("GET /api/v2/silences%s: %d %s", query, code, body)
	}
	var out models.GettableSilences
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("list: %v: %s", err, body)
	}
	if err := out.Validate(strfmt.Default); err != nil {
		t.Fatalf("list does not pass Alertmanager's schema: %v", err)
	}
	return out
}

func ids(sils models.GettableSilences) []string {
	out := []string{}
	for _, s := range sils {
		out = append(out, *s.ID)
	}
	return out
}

// A silence posted in Alertmanager's shape is stored, mutes what its
// matchers match, is listed and read back in Alertmanager's shape with its
// state, and is expired by DELETE.
func TestV2CreateListGetExpire(t *testing.T) {
	w := newAPI(t, testToken, false)
	id := w.v2Post(t, postableJSON(t, t0, t0.Add(time.Hour),
		matcher("alertname", "preempt_storm", false, true), matcher("replica", "sglang-0", false, true)))

	storm := map[string]string{"alertname": "preempt_storm", "replica": "sglang-0"}
	if got := w.store.Mutes(storm, t0.Add(time.Minute)); len(got) != 1 || got[0] != id {
		t.Fatalf("the posted silence mutes %v, want [%s]", got, id)
	}
	if got := w.store.Mutes(map[string]string{"alertname": "preempt_storm", "replica": "sglang-1"}, t0.Add(time.Minute)); len(got) != 0 {
		t.Fatalf("another replica is muted by %v", got)
	}

	code, body := w.v2Call(t, http.MethodGet, "/api/v2/silence/"+id, "", "")
	var got models.GettableSilence
	if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("GET one: %d %s", code, body)
	}
	if err := got.Validate(strfmt.Default); err != nil {
		t.Fatalf("GET one does not pass Alertmanager's schema: %v\n%s", err, body)
	}
	if *got.ID != id || *got.Status.State != "active" || *got.CreatedBy != "ana" || *got.Comment != "kernel upgrade" ||
		!time.Time(*got.StartsAt).Equal(t0) || !time.Time(*got.EndsAt).Equal(t0.Add(time.Hour)) || len(got.Matchers) != 2 ||
		*got.Matchers[0].Name != "alertname" || *got.Matchers[0].Value != "preempt_storm" || *got.Matchers[0].IsRegex || !*got.Matchers[0].IsEqual {
		t.Fatalf("GET one: %s", body)
	}
	for _, key := range []string{`"isEqual": true`, `"isRegex": false`, `"startsAt"`, `"endsAt"`, `"updatedAt"`, `"createdBy"`, `"status": {`} {
		if !strings.Contains(body, key) {
			t.Errorf("GET one lacks %s: %s", key, body)
		}
	}
	if code, body := w.v2Call(t, http.MethodGet, "/api/v2/silence/no-such-id", "", ""); code != http.StatusNotFound || body != "\"silence not found\"\n" {
		t.Errorf("GET unknown: %d %q, want 404 with a JSON string", code, body)
	}

	w.now = t0.Add(time.Minute)
	if code, body := w.v2Call(t, http.MethodDelete, "/api/v2/silence/"+id, testToken, ""); code != http.StatusOK || body != "" {
		t.Fatalf("DELETE: %d %q, want 200 without a body", code, body)
	}
	if st, _ := w.store.Get(id, w.now); st.State != StateExpired || !st.EndsAt.Equal(w.now) {
		t.Fatalf("after DELETE: %+v", st)
	}
	if got := w.store.Mutes(storm, w.now); len(got) != 0 {
		t.Fatalf("the expired silence still mutes: %v", got)
	}
	if code, body := w.v2Call(t, http.MethodDelete, "/api/v2/silence/"+id, testToken, ""); code != http.StatusConflict || !strings.Contains(body, "already expired") {
		t.Errorf("DELETE twice: %d %s, want 409", code, body)
	}
	if code, _ := w.v2Call(t, http.MethodDelete, "/api/v2/silence/no-such-id", testToken, ""); code != http.StatusNotFound {
		t.Errorf("DELETE unknown: %d, want 404", code)
	}
	w.noTokenInLogs(t)
}

// The list is ordered as Alertmanager orders it, narrowed by filter
// (silences having that matcher) and by the state parameters.
func TestV2ListOrderAndFilters(t *testing.T) {
	w := newAPI(t, testToken, false)
	longActive := w.v2Post(t, postableJSON(t, t0, t0.Add(3*time.Hour), matcher("replica", "sim-0", false, true)))
	shortActive := w.v2Post(t, postableJSON(t, t0, t0.Add(time.Hour), matcher("replica", "sim-1", false, true), matcher("class", "preempt.*", true, true)))
	pending := w.v2Post(t, postableJSON(t, t0.Add(2*time.Hour), t0.Add(4*time.Hour), matcher("replica", "sim-0", false, true)))
	expiredFirst := w.v2Post(t, postableJSON(t, t0, t0.Add(time.Hour), matcher("replica", "sim-2", false, true)))
	expiredLast := w.v2Post(t, postableJSON(t, t0, t0.Add(time.Hour), matcher("replica", "sim-3", false, true)))
	w.now = t0.Add(time.Minute)
	w.v2Call(t, http.MethodDelete, "/api/v2/silence/"+expiredFirst, testToken, "")
	w.now = t0.Add(2 * time.Minute)
	w.v2Call(t, http.MethodDelete, "/api/v2/silence/"+expiredLast, testToken, "")

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", []string{shortActive, longActive, pending, expiredLast, expiredFirst}},
		{"?filter=" + url.QueryEscape(`replica="sim-0"`), []string{longActive, pending}},
		{"?filter=" + url.QueryEscape(`class=~"preempt.*"`), []string{shortActive}},
		// A filter names a matcher the silence has, not a label it matches.
		{"?filter=" + url.QueryEscape(`class="preempt_storm"`), []string{}},
		{"?filter=" + url.QueryEscape(`replica="sim-1"`) + "&filter=" + url.QueryEscape(`class=~"preempt.*"`), []string{shortActive}},
		{"?expired=false", []string{shortActive, longActive, pending}},
		{"?active=false&pending=false", []string{expiredLast, expiredFirst}},
	} {
		if got := ids(w.v2List(t, tc.query)); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("GET /api/v2/silences%s = %v, want %v", tc.query, got, tc.want)
		}
	}
	states := map[string]string{}
	for _, s := range w.v2List(t, "") {
		states[*s.ID] = *s.Status.State
	}
	if states[longActive] != "active" || states[pending] != "pending" || states[expiredFirst] != "expired" {
		t.Errorf("states %v", states)
	}
	for query, want := range map[string]string{
		"?filter=" + url.QueryEscape(`replica=~"(("`): "filter",
		"?active=maybe": "active",
	} {
		code, body := w.v2Call(t, http.MethodGet, "/api/v2/silences"+query, "", "")
		if code != http.StatusBadRequest || !strings.HasPrefix(body, `"`+want) {
			t.Errorf("GET %s: %d %s, want 400 naming %s", query, code, body, want)
		}
	}
}

// isEqual=false and isRegex=true become !=, =~ and !~ matchers, and mute
// as Alertmanager's would; isEqual left out means equal.
func TestV2MatcherSemantics(t *testing.T) {
	storm := map[string]string{"alertname": "preempt_storm", "replica": "sim-0", "severity": "critical"}
	for _, tc := range []struct {
		name     string
		body     string
		stored   string
		mutes    bool
		mutesAlt bool // sim-1's kv_thrash warning
	}{
		{"regex", `{"name":"alertname","value":"preempt.*","isRegex":true,"isEqual":true}`, `alertname=~"preempt.*"`, true, false},
		{"not equal", `{"name":"severity","value":"info","isRegex":false,"isEqual":false}`, `severity!="info"`, true, true},
		{"not regex", `{"name":"replica","value":"sim-[0-4]","isRegex":true,"isEqual":false}`, `replica!~"sim-[0-4]"`, false, false},
		{"isEqual left out", `{"name":"replica","value":"sim-1","isRegex":false}`, `replica="sim-1"`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newAPI(t, testToken, false)
			// The store refuses a silence that matches an alert without
			// labels; the second matcher names the severities of both alerts.
			body := `{"matchers":[` + tc.body + `,{"name":"severity","value":"critical|warning","isRegex":true}],"startsAt":"2026-03-01T12:00:00Z","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana","comment":"x"}`
			id := w.v2Post(t, body)
			st, _ := w.store.Get(id, t0)
			if len(st.Matchers) != 2 || st.Matchers[0] != tc.stored {
				t.Fatalf("stored %v, want [%s]", st.Matchers, tc.stored)
			}
			alt := map[string]string{"alertname": "kv_thrash", "replica": "sim-1", "severity": "warning"}
			if got := len(w.store.Mutes(storm, t0)) > 0; got != tc.mutes {
				t.Errorf("mutes %v = %v, want %v", storm, got, tc.mutes)
			}
			if got := len(w.store.Mutes(alt, t0)) > 0; got != tc.mutesAlt {
				t.Errorf("mutes %v = %v, want %v", alt, got, tc.mutesAlt)
			}
			// Read back, the matcher has the same fields it was posted with.
			var got models.GettableSilence
			_, raw := w.v2Call(t, http.MethodGet, "/api/v2/silence/"+id, "", "")
			json.Unmarshal([]byte(raw), &got)
			var posted models.Matcher
			json.Unmarshal([]byte(tc.body), &posted)
			m := got.Matchers[0]
			if *m.Name != *posted.Name || *m.Value != *posted.Value || *m.IsRegex != *posted.IsRegex || *m.IsEqual != (posted.IsEqual == nil || *posted.IsEqual) {
				t.Errorf("read back %s, posted %s", raw, tc.body)
			}
		})
	}
}

// Posting a silence that names an existing one replaces it, as
// Alertmanager does for amtool silence update: the old one ends now, the
// new one has a new ID. An unknown ID is 404.
func TestV2PostWithIDReplaces(t *testing.T) {
	w := newAPI(t, testToken, false)
	old := w.v2Post(t, postableJSON(t, t0, t0.Add(time.Hour), matcher("replica", "sim-0", false, true)))
	w.now = t0.Add(10 * time.Minute)
	var ps map[string]any
	json.Unmarshal([]byte(postableJSON(t, t0, t0.Add(3*time.Hour), matcher("replica", "sim-0", false, true))), &ps)
	ps["id"] = old
	b, _ := json.Marshal(ps)
	replacement := w.v2Post(t, string(b))
	if replacement == old {
		t.Fatalf("the replacement kept the ID %s", old)
	}
	if st, _ := w.store.Get(old, w.now); st.State != StateExpired || !st.EndsAt.Equal(w.now) {
		t.Errorf("the replaced silence: %+v, want expired now", st)
	}
	if st, _ := w.store.Get(replacement, w.now); st.State != StateActive || !st.EndsAt.Equal(t0.Add(3*time.Hour)) {
		t.Errorf("the replacement: %+v", st)
	}
	ps["id"] = "no-such-id"
	b, _ = json.Marshal(ps)
	if code, body := w.v2Call(t, http.MethodPost, "/api/v2/silences", testToken, string(b)); code != http.StatusNotFound {
		t.Errorf("replacing an unknown silence: %d %s, want 404", code, body)
	}
	if n := len(w.store.List(w.now)); n != 2 {
		t.Errorf("%d silences stored, want 2", n)
	}
}

// Changes need the token, as on /api/v1; every refusal is a JSON string
// saying why, and a refused silence stores nothing.
func TestV2Refusals(t *testing.T) {
	valid := postableJSON(t, t0, t0.Add(time.Hour), matcher("replica", "sim-0", false, true))
	off := newAPI(t, "", false)
	if code, body := off.v2Call(t, http.MethodPost, "/api/v2/silences", "anything", valid); code != http.StatusForbidden || !strings.Contains(body, "api.token_file") {
		t.Errorf("no token configured: %d %s, want 403 saying how to enable", code, body)
	}
	standby := newAPI(t, testToken, true)
	if code, body := standby.v2Call(t, http.MethodPost, "/api/v2/silences", testToken, valid); code != http.StatusServiceUnavailable || !strings.Contains(body, "follower") {
		t.Errorf("standby: %d %s, want 503", code, body)
	}

	w := newAPI(t, testToken, false)
	id := w.v2Post(t, valid)
	for _, tc := range []struct{ method, path, token string }{
		{http.MethodPost, "/api/v2/silences", ""},
		{http.MethodPost, "/api/v2/silences", "wrong"},
		{http.MethodDelete, "/api/v2/silence/" + id, ""},
		{http.MethodDelete, "/api/v2/silence/" + id, "wrong"},
	} {
		code, body := w.v2Call(t, tc.method, tc.path, tc.token, valid)
		var msg string
		if code != http.StatusUnauthorized || json.Unmarshal([]byte(body), &msg) != nil || !strings.Contains(msg, "Bearer") || strings.Contains(body, testToken) {
			t.Errorf("%s %s with token %q: %d %s, want 401 as a JSON string", tc.method, tc.path, tc.token, code, body)
		}
	}
	if st, _ := w.store.Get(id, t0); st.State != StateActive {
		t.Errorf("a refused DELETE expired the silence: %+v", st)
	}

	req, _ := http.NewRequest(http.MethodPost, w.srv.URL+"/api/v2/silences", strings.NewReader(valid))
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

	for _, tc := range []struct{ name, body, want string }{
		{"not JSON", `{"matchers":`, "body: "},
		{"no comment", `{"matchers":[{"name":"replica","value":"x","isRegex":false}],"startsAt":"2026-03-01T12:00:00Z","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana"}`, "comment in body is required"},
		{"no isRegex", `{"matchers":[{"name":"replica","value":"x"}],"startsAt":"2026-03-01T12:00:00Z","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana","comment":"x"}`, "isRegex in body is required"},
		{"no matchers", `{"matchers":[],"startsAt":"2026-03-01T12:00:00Z","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana","comment":"x"}`, "matchers"},
		{"bad time", `{"matchers":[{"name":"replica","value":"x","isRegex":false}],"startsAt":"soon","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana","comment":"x"}`, "body: "},
		{"bad regex", `{"matchers":[{"name":"replica","value":"((","isRegex":true}],"startsAt":"2026-03-01T12:00:00Z","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana","comment":"x"}`, `matchers[0]: \"((\" is not a valid regular expression`},
		{"matches everything", `{"matchers":[{"name":"replica","value":".*","isRegex":true}],"startsAt":"2026-03-01T12:00:00Z","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana","comment":"x"}`, "would mute everything"},
		{"end before start", `{"matchers":[{"name":"replica","value":"x","isRegex":false}],"startsAt":"2026-03-01T14:00:00Z","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana","comment":"x"}`, "is not after starts_at"},
		{"annotations", `{"matchers":[{"name":"replica","value":"x","isRegex":false}],"startsAt":"2026-03-01T12:00:00Z","endsAt":"2026-03-01T13:00:00Z","createdBy":"ana","comment":"x","annotations":{"ticket":"OPS-1"}}`, "annotations: not supported"},
	} {
		code, body := w.v2Call(t, http.MethodPost, "/api/v2/silences", testToken, tc.body)
		var msg string
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &msg) != nil || !strings.Contains(msg, strings.ReplaceAll(tc.want, `\"`, `"`)) {
			t.Errorf("%s: %d %s, want 400 saying %q", tc.name, code, body, tc.want)
		}
	}
	if n := len(w.store.List(t0)); n != 1 {
		t.Errorf("%d silences stored after the refusals, want 1", n)
	}
	w.noTokenInLogs(t)
}
