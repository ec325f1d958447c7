package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/webhook"
)

// bubbleEndpoint is a webhook endpoint on an in-memory network, so that a
// synctest bubble's clock advances while requests are in flight.
type bubbleEndpoint struct {
	srv     *httptest.Server
	mu      sync.Mutex
	arrived map[string]time.Time // first arrival per delivery id
	count   int
}

func newBubbleEndpoint(t *testing.T, network *memnet.Network, handle func(w http.ResponseWriter, r *http.Request)) *bubbleEndpoint {
	t.Helper()
	e := &bubbleEndpoint{arrived: map[string]time.Time{}}
	ln, err := network.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p webhook.Payload
		if err := json.Unmarshal(body, &p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.count++
		if _, seen := e.arrived[p.Fingerprint]; !seen && p.Class != notify.ClassDeliveryFailure {
			e.arrived[p.Fingerprint] = time.Now()
		}
		e.mu.Unlock()
		handle(w, r)
	}))
	e.srv.Listener = ln
	e.srv.Start()
	return e
}

func (e *bubbleEndpoint) requests() (int, map[string]time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]time.Time, len(e.arrived))
	for k, v := range e.arrived {
		out[k] = v
	}
	return e.count, out
}

// A receiver whose endpoint answers 500, and one whose endpoint hangs
// until every attempt times out, delay nothing for a third receiver the
// same routes select: each named receiver has its own queue and worker,
// and the healthy one gets every page the moment it is sent.
func TestAFailingReceiverDoesNotDelayTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := memnet.New()
		ok := newBubbleEndpoint(t, network, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
		down := newBubbleEndpoint(t, network, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "database unavailable", http.StatusInternalServerError)
		})
		release := make(chan struct{})
		hang := newBubbleEndpoint(t, network, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		transport := &http.Transport{DialContext: network.DialContext}
		client := &http.Client{Transport: transport}
		receiver := func(name string, e *bubbleEndpoint) notify.Integration {
			n, err := webhook.New(webhook.Config{URL: notify.Secret(e.srv.URL + "/hook"), Secret: "s"}, client, nil)
			if err != nil {
				t.Fatal(err)
			}
			return notify.Integration{Name: name, Notifier: n}
		}
		d, err := notify.NewDispatcher(notify.DispatcherConfig{
			Integrations: []notify.Integration{receiver("team-a-down", down), receiver("team-a-hang", hang), receiver("team-b", ok)},
			Routes: notify.RouteConfig{Routes: []notify.Route{
				{Matchers: []string{`team="a"`}, Receivers: []string{"team-a-down", "team-a-hang"}, Continue: true},
				{Severities: []string{"critical", "warning"}, Receivers: []string{"team-b"}},
			}},
			Queue: notify.QueueOptions{AttemptTimeout: 20 * time.Second, InitialBackoff: 5 * time.Second},
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = d.Run(ctx); close(done) }()
		defer func() {
			close(release)
			stop()
			<-done
			transport.CloseIdleConnections()
			for _, e := range []*bubbleEndpoint{ok, down, hang} {
				e.srv.Close()
			}
			network.Close()
		}()

		sent := map[string]time.Time{}
		for i, fp := range []string{"aaaa0001", "aaaa0002", "aaaa0003", "aaaa0004", "aaaa0005"} {
			ev := notifytest.PreemptStorm(time.Now())
			ev.Fingerprint, ev.Replica = fp, "llama-70b-"+string(rune('0'+i))
			ev.Labels = map[string]string{"team": "a"}
			d.Send(ev)
			sent[fp] = time.Now()
			synctest.Wait()
			<-time.After(30 * time.Second)
		}
		synctest.Wait()

		n, arrived := ok.requests()
		if len(arrived) != len(sent) {
			t.Fatalf("team-b got %d of %d incidents (%d requests)", len(arrived), len(sent), n)
		}
		for fp, at := range sent {
			if got := arrived[fp]; !got.Equal(at) {
				t.Errorf("team-b got %s %s after it was sent, want at once", fp, got.Sub(at))
			}
		}
		if n, _ := down.requests(); n < len(sent)+1 {
			t.Errorf("the failing receiver was tried %d times, want retries beyond the %d events", n, len(sent))
		}
		if n, _ := hang.requests(); n < 2 {
			t.Errorf("the hanging receiver was tried %d times", n)
		}
		if q := d.Queue("team-a-down"); q.Len() == 0 {
			t.Error("the failing receiver's outbox is empty: its failures were not kept for retry")
		}
		if q := d.Queue("team-b"); q.Len() != 0 {
			t.Errorf("team-b still holds %d events", q.Len())
		}
	})
}
