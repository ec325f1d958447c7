package slack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	slackapi "github.com/slack-go/slack"
	"go.uber.org/goleak"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/slack"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const botToken = "xoxb-1111-2222-SECRETtokenVALUE"

func botNotifier(t *testing.T, srv *notifytest.SlackServer) *slack.Notifier {
	t.Helper()
	n, err := slack.New(slack.Config{BotToken: botToken, Channel: "#llm-oncall", APIURL: srv.APIURL()}, &http.Client{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func webhookNotifier(t *testing.T, srv *notifytest.SlackServer) *slack.Notifier {
	t.Helper()
	n, err := slack.New(slack.Config{WebhookURL: notify.Secret(srv.WebhookURL())}, &http.Client{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// messageJSON is what a golden file holds: the fallback text and the blocks.
func messageJSON(t *testing.T, text, blocks string) []byte {
	t.Helper()
	var b any
	if err := json.Unmarshal([]byte(blocks), &b); err != nil {
		t.Fatalf("blocks are not JSON: %v", err)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // keep the golden files readable
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"text": text, "blocks": b}); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// recoveredValues are a replica's values as an incident resolves, named
// the way the alert tracker names them.
func recoveredValues() []notify.Field {
	return []notify.Field{
		{Name: "queued requests", Value: 4},
		{Name: "KV cache usage", Value: 0.62, Unit: "ratio"},
		{Name: "time to first token p99", Value: 0.41, Unit: "s"},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run go test -update):\n%s", path, got)
	}
}

// The incident lifecycle against the fake Web API, with golden Block Kit
// messages for the firing post and the resolved update.
func TestLifecycleAndGoldenMessages(t *testing.T) {
	for _, ev := range notifytest.Samples() {
		t.Run(ev.Class, func(t *testing.T) {
			srv := notifytest.NewSlackServer()
			defer srv.Close()
			n := botNotifier(t, srv)
			inc := &notify.Incident{Fingerprint: ev.Fingerprint}
			if err := n.NotifyIncident(ctx5(t), ev, inc); err != nil {
				t.Fatal(err)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Method != "chat.postMessage" {
				t.Fatalf("requests %+v", reqs)
			}
			if reqs[0].Form.Get("token") != botToken || reqs[0].Form.Get("channel") != "#llm-oncall" {
				t.Errorf("token/channel not sent as expected")
			}
			golden(t, ev.Class+".firing.golden.json", messageJSON(t, reqs[0].Form.Get("text"), reqs[0].Form.Get("blocks")))
			parent := srv.Parents()[0]
			if inc.Ref[slack.RefChannel] != notifytest.SlackChannelID || inc.Ref[slack.RefTS] != parent.TS {
				t.Fatalf("ref %v, want the channel ID and ts Slack returned (%s)", inc.Ref, parent.TS)
			}
			inc.Open, inc.Last = true, ev

			// Escalation: the parent is updated and the thread says so.
			esc := notifytest.Update(ev, ev.At.Add(3*time.Minute), detect.Critical)
			if ev.Severity == detect.Critical {
				esc = notifytest.Update(ev, ev.At.Add(3*time.Minute), detect.Warning)
			}
			if err := n.NotifyIncident(ctx5(t), esc, inc); err != nil {
				t.Fatal(err)
			}
			inc.Last = esc
			res := notifytest.Resolve(esc, notifytest.T0.Add(17*time.Minute+12*time.Second))
			res.Severity = ev.Severity
			res.Recovered = recoveredValues()
			if err := n.NotifyIncident(ctx5(t), res, inc); err != nil {
				t.Fatal(err)
			}
			if ps := srv.Parents(); len(ps) != 1 {
				t.Fatalf("parents %d, want 1", len(ps))
			}
			parent = srv.Parents()[0]
			if parent.Updates != 2 {
				t.Errorf("parent updated %d times, want 2", parent.Updates)
			}
			replies := srv.Replies(parent.TS)
			if len(replies) != 2 || !strings.Contains(replies[0].Text, "scalated") || !strings.Contains(replies[1].Text, "[RESOLVED]") ||
				!strings.Contains(replies[1].Text, "recovered after 17 min; queue 4") {
				t.Errorf("thread replies %+v", replies)
			}
			if want := "<" + res.PostmortemURL + "|Postmortem draft>"; res.PostmortemURL == "" || len(replies) != 2 || !strings.HasSuffix(replies[1].Text, want) {
				t.Errorf("the resolve's thread reply does not end with the postmortem link %q: %+v", want, replies)
			}
			var lastUpdate notifytest.Request
			for _, r := range srv.Requests() {
				if r.Method == "chat.update" {
					lastUpdate = r
				}
				if r.Method == "chat.postMessage" && r.Form.Get("thread_ts") != "" && strings.Contains(r.Form.Get("text"), "[RESOLVED]") && r.Form.Get("reply_broadcast") != "true" {
					t.Error("the resolve reply is not broadcast to the channel")
				}
			}
			if lastUpdate.Form.Get("ts") != parent.TS || lastUpdate.Form.Get("channel") != notifytest.SlackChannelID {
				t.Errorf("chat.update used channel %q ts %q", lastUpdate.Form.Get("channel"), lastUpdate.Form.Get("ts"))
			}
			golden(t, ev.Class+".resolved.golden.json", messageJSON(t, lastUpdate.Form.Get("text"), lastUpdate.Form.Get("blocks")))
		})
	}
}

func TestDeletedParentGetsANewOne(t *testing.T) {
	srv := notifytest.NewSlackServer()
	defer srv.Close()
	n := botNotifier(t, srv)
	ev := notifytest.PreemptStorm(notifytest.T0)
	inc := &notify.Incident{Fingerprint: ev.Fingerprint}
	if err := n.NotifyIncident(ctx5(t), ev, inc); err != nil {
		t.Fatal(err)
	}
	oldTS := inc.Ref[slack.RefTS]
	inc.Open, inc.Last = true, ev
	srv.Delete(oldTS)
	if err := n.NotifyIncident(ctx5(t), notifytest.Resolve(ev, notifytest.T0.Add(time.Hour)), inc); err != nil {
		t.Fatalf("a deleted parent must not be an error: %v", err)
	}
	ps := srv.Parents()
	if len(ps) != 1 || ps[0].TS == oldTS || inc.Ref[slack.RefTS] != ps[0].TS {
		t.Fatalf("parents %+v, ref %v", ps, inc.Ref)
	}
	if !strings.Contains(ps[0].Text, "RESOLVED") {
		t.Errorf("new parent does not show the current state: %q", ps[0].Text)
	}
}

func TestReDeliveredTriggerUpdatesTheSameParent(t *testing.T) {
	srv := notifytest.NewSlackServer()
	defer srv.Close()
	n := botNotifier(t, srv)
	ev := notifytest.CacheCollapse(notifytest.T0)
	// The parent was posted but the process died before recording delivery:
	// the ref survived (the queue saves refs after every attempt).
	inc := &notify.Incident{Fingerprint: ev.Fingerprint}
	if err := n.NotifyIncident(ctx5(t), ev, inc); err != nil {
		t.Fatal(err)
	}
	if err := n.NotifyIncident(ctx5(t), ev, inc); err != nil {
		t.Fatal(err)
	}
	if ps := srv.Parents(); len(ps) != 1 || ps[0].Updates != 1 {
		t.Errorf("parents %+v, want one parent updated once", ps)
	}
	if len(srv.Messages()) != 1 {
		t.Errorf("no thread reply expected for a re-delivered trigger")
	}
}

var (
	forbidden = []string{"<!channel>", "<!here>", "<https://evil", "<@U123>", "<!everyone>"}
	mention   = regexp.MustCompile(`(?i)[@!](channel|here|everyone)\b`)
)

func assertInert(t *testing.T, where, s string) {
	t.Helper()
	for _, f := range forbidden {
		if strings.Contains(s, f) {
			t.Errorf("%s contains %q", where, f)
		}
	}
	if m := mention.FindString(s); m != "" {
		t.Errorf("%s contains the mention token %q", where, m)
	}
}

func hostile(ev notify.Event) notify.Event {
	ev.Model = "<!channel> <https://evil|click>"
	ev.Replica = "@here replica <@U123>"
	ev.Summary = "latency up @channel <!everyone> & more"
	ev.Diagnosis = "error text: <https://evil|login here>"
	ev.Evidence = append(ev.Evidence, notify.Field{Name: "<!here>", Value: 1, Threshold: "@everyone"})
	ev.ExplainedBy = []string{"<@U123>"}
	ev.Emergency = append(ev.Emergency, "<!channel> restart")
	return ev
}

func TestReplicaStringsCannotMentionOrLink(t *testing.T) {
	srv := notifytest.NewSlackServer()
	defer srv.Close()
	ev := hostile(notifytest.PreemptStorm(notifytest.T0))
	bot := botNotifier(t, srv)
	inc := &notify.Incident{Fingerprint: ev.Fingerprint}
	if err := bot.NotifyIncident(ctx5(t), ev, inc); err != nil {
		t.Fatal(err)
	}
	inc.Open, inc.Last = true, notifytest.PreemptStorm(notifytest.T0)
	if err := bot.NotifyIncident(ctx5(t), notifytest.Update(ev, notifytest.T0.Add(time.Minute), detect.Warning), inc); err != nil {
		t.Fatal(err)
	}
	if err := webhookNotifier(t, srv).Notify(ctx5(t), ev); err != nil {
		t.Fatal(err)
	}
	for i, r := range srv.Requests() {
		// Check what Slack decodes: form values, or the webhook's JSON.
		var decoded string
		if r.Method == "webhook" {
			var m slackapi.WebhookMessage
			if err := json.Unmarshal(r.Body, &m); err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(m.Blocks)
			decoded = m.Text + string(b)
			decoded = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(decoded)
		} else {
			decoded = r.Form.Get("text") + r.Form.Get("blocks")
			decoded = strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(decoded)
		}
		assertInert(t, r.Method+"#"+string(rune('0'+i)), decoded)
		if r.Form.Get("thread_ts") != "" {
			continue // a thread reply names no model
		}
		if !strings.Contains(decoded, "&lt;!channel&gt;") && !strings.Contains(decoded, "&lt;!\u2060channel&gt;") {
			t.Errorf("%s: the model name should still be shown, escaped", r.Method)
		}
	}
	// Configured links stay links.
	if !strings.Contains(strings.ReplaceAll(strings.ReplaceAll(srv.Requests()[0].Form.Get("blocks"), `\u003c`, "<"), `\u003e`, ">"), "<https://watchdog.example.internal:9464/runbooks/preempt_storm|Runbook>") {
		t.Error("runbook link missing")
	}
}

func TestEscape(t *testing.T) {
	tests := map[string]string{
		"<!channel>":                   "&lt;!\u2060channel&gt;",
		"a & b":                        "a &amp; b",
		"@here now":                    "@\u2060here now",
		"<https://evil|click>":         "&lt;https:\u2060//evil|click&gt;",
		"model https://evil.example/x": "model https:\u2060//evil.example/x",
		"pod www.evil.example":         "pod www\u2060.evil.example",
		"mail@herewego.com":            "mail@herewego.com",
		"Llama-3.1-70B @Channel x":     "Llama-3.1-70B @\u2060Channel x",
	}
	for in, want := range tests {
		if got := slack.Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLimitsAreEnforced(t *testing.T) {
	ev := notifytest.RetryAvalanche(notifytest.T0)
	long := strings.Repeat("<&>", 5000)
	ev.Class = long
	ev.Replica = long
	ev.Summary = long
	ev.Diagnosis = strings.Repeat("d", 50000)
	for range 200 {
		ev.Evidence = append(ev.Evidence, notify.Field{Name: long, Value: 1, Threshold: long})
		ev.Emergency = append(ev.Emergency, long)
		ev.RootCause = append(ev.RootCause, long)
	}
	blocks := slack.Blocks(ev)
	if len(blocks) > slack.MaxBlocks {
		t.Errorf("%d blocks", len(blocks))
	}
	total := 0
	for _, b := range blocks {
		raw, _ := json.Marshal(b)
		var m struct {
			Type     string                  `json:"type"`
			Text     *struct{ Text string }  `json:"text"`
			Fields   []struct{ Text string } `json:"fields"`
			Elements []struct{ Text string } `json:"elements"`
		}
		_ = json.Unmarshal(raw, &m)
		if m.Text != nil {
			n := utf8.RuneCountInString(m.Text.Text)
			total += n
			if m.Type == "header" && n > slack.MaxHeader {
				t.Errorf("header %d runes", n)
			}
			if n > slack.MaxSectionText {
				t.Errorf("%s text %d runes", m.Type, n)
			}
			if strings.HasSuffix(m.Text.Text, "&am") || strings.HasSuffix(m.Text.Text, "&l") {
				t.Errorf("entity cut: %q", m.Text.Text[len(m.Text.Text)-10:])
			}
		}
		if len(m.Fields) > slack.MaxFields {
			t.Errorf("%d fields", len(m.Fields))
		}
		for _, f := range append(m.Fields, m.Elements...) {
			n := utf8.RuneCountInString(f.Text)
			total += n
			if n > slack.MaxFieldText && m.Type == "section" {
				t.Errorf("field %d runes", n)
			}
		}
	}
	if total > slack.MaxTotalText {
		t.Errorf("total block text %d runes, cap %d", total, slack.MaxTotalText)
	}
	if n := utf8.RuneCountInString(slack.FallbackText(ev)); n > slack.MaxFallbackText {
		t.Errorf("fallback %d runes", n)
	}
	if !strings.Contains(slack.FallbackText(ev), "…(truncated)") {
		t.Error("truncation must be visible")
	}
}

func TestFailureClassification(t *testing.T) {
	okFalse := func(code string) notifytest.Response {
		return notifytest.Response{Status: 200, Body: `{"ok":false,"error":"` + code + `"}`}
	}
	tests := []struct {
		name          string
		webhook       bool
		resp          notifytest.Response
		wantPermanent bool
		wantReason    notify.Reason
		wantAfter     time.Duration
	}{
		{name: "429 with Retry-After", resp: notifytest.Response{Status: 429, Header: http.Header{"Retry-After": {"12"}}}, wantReason: notify.ReasonRateLimited, wantAfter: 12 * time.Second},
		{name: "429 without Retry-After", resp: notifytest.Response{Status: 429}, wantReason: notify.ReasonRateLimited},
		{name: "ratelimited", resp: okFalse("ratelimited"), wantReason: notify.ReasonRateLimited},
		{name: "500", resp: notifytest.Response{Status: 500, Body: "<html>", Header: http.Header{"Content-Type": {"text/html"}}}, wantReason: notify.ReasonServerError},
		{name: "503", resp: notifytest.Response{Status: 503}, wantReason: notify.ReasonServerError},
		{name: "invalid_auth", resp: okFalse("invalid_auth"), wantPermanent: true, wantReason: notify.ReasonAuthError},
		{name: "token_revoked", resp: okFalse("token_revoked"), wantPermanent: true, wantReason: notify.ReasonAuthError},
		{name: "channel_not_found on post", resp: okFalse("channel_not_found"), wantPermanent: true, wantReason: notify.ReasonClientError},
		{name: "invalid_blocks", resp: okFalse("invalid_blocks"), wantPermanent: true, wantReason: notify.ReasonInvalidPayload},
		{name: "internal_error", resp: okFalse("internal_error"), wantReason: notify.ReasonServerError},
		{name: "timeout", resp: notifytest.Response{Hang: true}, wantReason: notify.ReasonTimeout},
		{name: "connection reset", resp: notifytest.Response{Reset: true}, wantReason: notify.ReasonNetwork},
		{name: "webhook 429 with Retry-After", webhook: true, resp: notifytest.Response{Status: 429, Header: http.Header{"Retry-After": {"3"}}}, wantReason: notify.ReasonRateLimited, wantAfter: 3 * time.Second},
		{name: "webhook 404 no_service", webhook: true, resp: notifytest.Response{Status: 404, Body: "no_service"}, wantPermanent: true, wantReason: notify.ReasonClientError},
		{name: "webhook 403 invalid_token", webhook: true, resp: notifytest.Response{Status: 403, Body: "invalid_token"}, wantPermanent: true, wantReason: notify.ReasonAuthError},
		{name: "webhook 500", webhook: true, resp: notifytest.Response{Status: 500}, wantReason: notify.ReasonServerError},
		{name: "webhook timeout", webhook: true, resp: notifytest.Response{Hang: true}, wantReason: notify.ReasonTimeout},
		{name: "webhook reset", webhook: true, resp: notifytest.Response{Reset: true}, wantReason: notify.ReasonNetwork},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := notifytest.NewSlackServer()
			defer srv.Close()
			srv.Respond(func(int, notifytest.Request) notifytest.Response { return tc.resp })
			n := botNotifier(t, srv)
			if tc.webhook {
				n = webhookNotifier(t, srv)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			err := n.Notify(ctx, notifytest.PreemptStorm(notifytest.T0))
			if err == nil {
				t.Fatal("want an error")
			}
			if got := len(srv.Requests()); got != 1 {
				t.Errorf("%d requests, want exactly one attempt", got)
			}
			if got := notify.IsPermanent(err); got != tc.wantPermanent {
				t.Errorf("permanent = %v, want %v (%v)", got, tc.wantPermanent, err)
			}
			if got := notify.ReasonOf(err); got != tc.wantReason {
				t.Errorf("reason = %s, want %s (%v)", got, tc.wantReason, err)
			}
			if throttled := tc.wantReason == notify.ReasonRateLimited; notify.IsThrottled(err) != throttled {
				t.Errorf("throttled = %v, want %v", notify.IsThrottled(err), throttled)
			}
			if after, ok := notify.RetryAfterOf(err); ok != (tc.wantAfter > 0) || after != tc.wantAfter {
				t.Errorf("retry after %s %v, want %s", after, ok, tc.wantAfter)
			}
			for _, secret := range []string{botToken, srv.WebhookURL(), "webhooksecretpart"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q leaks %q", err, secret)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  slack.Config
		want string // "" = valid
	}{
		{"disabled", slack.Config{APIURL: slack.DefaultAPIURL}, ""},
		{"bot", slack.Config{BotToken: "xoxb-1", Channel: "C1", APIURL: slack.DefaultAPIURL}, ""},
		{"webhook", slack.Config{WebhookURL: "https://hooks.slack.com/services/T/B/X"}, ""},
		{"bot without channel", slack.Config{BotToken: "xoxb-1"}, "channel: required"},
		{"channel only", slack.Config{Channel: "C1"}, "bot_token: required"},
		{"bad api url", slack.Config{BotToken: "xoxb-1", Channel: "C1", APIURL: "slack.com"}, "api_url"},
		{"bad webhook", slack.Config{WebhookURL: "hooks.slack.com/services/T/B/SECRETPART"}, "webhook_url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "SECRETPART") {
				t.Error("error quotes the webhook URL")
			}
		})
	}
}

func TestWebhookModePostsEveryStateChange(t *testing.T) {
	srv := notifytest.NewSlackServer()
	defer srv.Close()
	n := webhookNotifier(t, srv)
	ev := notifytest.RetryAvalanche(notifytest.T0)
	inc := &notify.Incident{Fingerprint: ev.Fingerprint}
	if err := n.NotifyIncident(ctx5(t), ev, inc); err != nil {
		t.Fatal(err)
	}
	inc.Open, inc.Last = true, ev
	same := notifytest.Update(ev, notifytest.T0.Add(time.Minute), detect.Warning)
	if err := n.NotifyIncident(ctx5(t), same, inc); err != notify.ErrNothingToSend {
		t.Errorf("unchanged update: %v, want ErrNothingToSend", err)
	}
	if err := n.NotifyIncident(ctx5(t), notifytest.Resolve(ev, notifytest.T0.Add(time.Hour)), inc); err != nil {
		t.Fatal(err)
	}
	reqs := srv.Requests()
	if len(reqs) != 2 || reqs[0].Method != "webhook" || !bytes.Contains(reqs[1].Body, []byte("RESOLVED")) {
		t.Errorf("webhook posts %d: %s", len(reqs), reqs[len(reqs)-1].Body)
	}
}
