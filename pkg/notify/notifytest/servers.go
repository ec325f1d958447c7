package notifytest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Response scripts one reply of a fake server. The zero value is the
// normal success reply.
type Response struct {
	Status int         // 0: the endpoint's success status
	Header http.Header // extra headers, e.g. Retry-After
	Body   string      // "" with Status 0: the endpoint's success body
	Hang   bool        // block until the client gives up (timeout)
	Reset  bool        // hijack the connection and close it (connection reset)
}

// Request is one request a fake server received.
type Request struct {
	At     time.Time
	Method string     // Slack method ("chat.postMessage", "chat.update"), "webhook", or the PagerDuty path
	Body   []byte     // raw body
	Form   url.Values // Slack Web API form fields
	Reply  int        // status sent, 0 for hang/reset
}

type fake struct {
	mu      sync.Mutex
	reqs    []Request
	respond func(n int, r Request) Response
}

// Respond installs the script: f gets the 0-based request number and the
// request, and returns the reply. nil restores "always succeed".
func (f *fake) Respond(fn func(n int, r Request) Response) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.respond = fn
}

// Requests returns every request received so far.
func (f *fake) Requests() []Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Request(nil), f.reqs...)
}

// record appends r and returns the scripted reply.
func (f *fake) record(r Request) (Response, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.reqs)
	f.reqs = append(f.reqs, r)
	var resp Response
	if f.respond != nil {
		resp = f.respond(n, r)
	}
	return resp, n
}

func (f *fake) setReply(n, status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs[n].Reply = status
}

// misbehave handles Hang and Reset; it reports whether it answered.
func misbehave(w http.ResponseWriter, r *http.Request, resp Response) bool {
	switch {
	case resp.Hang:
		<-r.Context().Done()
		return true
	case resp.Reset:
		hj, ok := w.(http.Hijacker)
		if !ok {
			panic("notifytest: cannot hijack")
		}
		conn, _, err := hj.Hijack()
		if err == nil {
			conn.Close()
		}
		return true
	}
	return false
}

func reply(w http.ResponseWriter, resp Response, status int, body string) {
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if resp.Status != 0 {
		status = resp.Status
	}
	if resp.Body != "" || resp.Status != 0 {
		body = resp.Body
	}
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// PagerDutyServer is a fake Events API v2 endpoint.
type PagerDutyServer struct {
	*httptest.Server
	fake
}

// PagerDutyEvent is the part of a received event tests look at.
type PagerDutyEvent struct {
	RoutingKey string `json:"routing_key"`
	Action     string `json:"event_action"`
	DedupKey   string `json:"dedup_key"`
	Payload    struct {
		Summary  string `json:"summary"`
		Source   string `json:"source"`
		Severity string `json:"severity"`
		Class    string `json:"class"`
	} `json:"payload"`
}

// NewPagerDutyServer starts the fake; Close it when done.
func NewPagerDutyServer() *PagerDutyServer {
	s := &PagerDutyServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		resp, n := s.record(Request{At: time.Now(), Method: r.URL.Path, Body: body})
		if misbehave(w, r, resp) {
			return
		}
		if r.URL.Path != "/v2/enqueue" {
			resp = Response{Status: http.StatusNotFound, Body: `{"status":"not found"}`}
		}
		var ev PagerDutyEvent
		_ = json.Unmarshal(body, &ev)
		status := http.StatusAccepted
		if resp.Status != 0 {
			status = resp.Status
		}
		s.setReply(n, status)
		reply(w, resp, http.StatusAccepted, fmt.Sprintf(`{"status":"success","message":"Event processed","dedup_key":%q}`, ev.DedupKey))
	}))
	return s
}

// EventsURL is the enqueue URL to configure.
func (s *PagerDutyServer) EventsURL() string { return s.URL + "/v2/enqueue" }

// Accepted returns the events answered with 202, in order.
func (s *PagerDutyServer) Accepted() []PagerDutyEvent {
	var out []PagerDutyEvent
	for _, r := range s.Requests() {
		if r.Reply == http.StatusAccepted {
			var ev PagerDutyEvent
			_ = json.Unmarshal(r.Body, &ev)
			out = append(out, ev)
		}
	}
	return out
}

// SlackMessage is a message as the fake Slack keeps it.
type SlackMessage struct {
	Channel  string
	TS       string
	ThreadTS string
	Text     string
	Blocks   string // JSON
	Updates  int
}

// SlackServer is a fake Slack Web API (chat.postMessage, chat.update) and
// incoming webhook. It hands out distinct ts values and answers the channel
// ID "C0WATCHDOG" whatever channel name was posted to.
type SlackServer struct {
	*httptest.Server
	fake
	msgs   map[string]*SlackMessage
	order  []string
	nextTS int
}

// SlackChannelID is the channel ID the fake returns.
const SlackChannelID = "C0WATCHDOG"

// SlackWebhookPath is the path of the fake's incoming webhook.
const SlackWebhookPath = "/services/T0000/B0000/webhooksecretpart"

// NewSlackServer starts the fake; Close it when done.
func NewSlackServer() *SlackServer {
	s := &SlackServer{msgs: map[string]*SlackMessage{}, nextTS: 100}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// APIURL is the Web API base URL to configure (SLACK_API_URL); the
// integration appends the trailing slash slack-go needs.
func (s *SlackServer) APIURL() string { return s.URL + "/api" }

// WebhookURL is the incoming-webhook URL to configure.
func (s *SlackServer) WebhookURL() string { return s.URL + SlackWebhookPath }

func (s *SlackServer) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := Request{At: time.Now(), Body: body}
	if r.URL.Path == SlackWebhookPath {
		req.Method = "webhook"
	} else {
		req.Method = strings.TrimPrefix(r.URL.Path, "/api/")
		req.Form, _ = url.ParseQuery(string(body))
	}
	resp, n := s.record(req)
	if misbehave(w, r, resp) {
		return
	}
	if resp.Status != 0 || resp.Body != "" {
		s.setReply(n, max(resp.Status, 200))
		reply(w, resp, 200, "")
		return
	}
	s.setReply(n, 200)
	switch req.Method {
	case "webhook":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
	case "chat.postMessage":
		s.mu.Lock()
		s.nextTS++
		ts := fmt.Sprintf("1773480400.%06d", s.nextTS)
		m := &SlackMessage{Channel: SlackChannelID, TS: ts, ThreadTS: req.Form.Get("thread_ts"),
			Text: req.Form.Get("text"), Blocks: req.Form.Get("blocks")}
		if m.ThreadTS != "" && s.msgs[m.ThreadTS] == nil {
			m.ThreadTS = "" // parent gone: Slack posts un-threaded
		}
		s.msgs[ts] = m
		s.order = append(s.order, ts)
		s.mu.Unlock()
		reply(w, Response{}, 200, fmt.Sprintf(`{"ok":true,"channel":%q,"ts":%q,"message":{"type":"message","text":"","ts":%q,"thread_ts":%q}}`, m.Channel, ts, ts, m.ThreadTS))
	case "chat.update":
		s.mu.Lock()
		m := s.msgs[req.Form.Get("ts")]
		if m != nil && req.Form.Get("channel") == m.Channel {
			m.Text, m.Blocks = req.Form.Get("text"), req.Form.Get("blocks")
			m.Updates++
		}
		s.mu.Unlock()
		if m == nil || req.Form.Get("channel") != SlackChannelID {
			reply(w, Response{}, 200, `{"ok":false,"error":"message_not_found"}`)
			return
		}
		reply(w, Response{}, 200, fmt.Sprintf(`{"ok":true,"channel":%q,"ts":%q,"text":""}`, m.Channel, m.TS))
	default:
		reply(w, Response{}, 200, `{"ok":false,"error":"unknown_method"}`)
	}
}

// Messages returns the Web API messages in the order they were posted.
func (s *SlackServer) Messages() []SlackMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SlackMessage
	for _, ts := range s.order {
		if m := s.msgs[ts]; m != nil {
			out = append(out, *m)
		}
	}
	return out
}

// Parents returns the messages that are not thread replies.
func (s *SlackServer) Parents() []SlackMessage {
	var out []SlackMessage
	for _, m := range s.Messages() {
		if m.ThreadTS == "" {
			out = append(out, m)
		}
	}
	return out
}

// Replies returns the thread replies to ts.
func (s *SlackServer) Replies(ts string) []SlackMessage {
	var out []SlackMessage
	for _, m := range s.Messages() {
		if m.ThreadTS == ts {
			out = append(out, m)
		}
	}
	return out
}

// Delete removes a message, as a human deleting the parent would.
func (s *SlackServer) Delete(ts string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.msgs, ts)
}
