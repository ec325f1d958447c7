package httpclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/httpclient"
)

// A client given a dial function opens every connection through it: the
// daemon's tests run it over an in-memory network in a synctest bubble,
// where a socket would stop the fake clock.
func TestDialsThroughTheGivenNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		network := memnet.New()
		defer network.Close()
		ln, err := network.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Accept-Encoding") != "" {
				t.Errorf("Accept-Encoding %q: the transport asked for compression", r.Header.Get("Accept-Encoding"))
			}
			_, _ = io.WriteString(w, "pong")
		})}
		go srv.Serve(ln)
		defer srv.Close()

		c := httpclient.New("test", time.Second, commoncfg.WithDialContextFunc(network.DialContext))
		defer c.CloseIdleConnections()
		resp, err := c.Get("http://" + ln.Addr().String() + "/ping")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "pong" {
			t.Errorf("body %q", body)
		}
	})
}

// Go's default transport takes its proxy from the environment; these
// clients do too, so a daemon behind an egress proxy still reaches Slack.
func TestProxyFromTheEnvironment(t *testing.T) {
	proxied := make(chan string, 1)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied <- r.URL.String()
	}))
	defer proxy.Close()
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("NO_PROXY", "")
	c := httpclient.New("test", 5*time.Second)
	resp, err := c.Get("http://hooks.example.invalid/services/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case u := <-proxied:
		if u != "http://hooks.example.invalid/services/x" {
			t.Errorf("the proxy was asked for %q", u)
		}
	default:
		t.Error("the request did not go through HTTP_PROXY")
	}
}

func TestTimeout(t *testing.T) {
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hung.Close()
	c := httpclient.New("test", 50*time.Millisecond)
	_, err := c.Get(hung.URL)
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		t.Errorf("a hung server: %v, want a timeout", err)
	}
	untimed := httpclient.New("test", 0)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hung.URL, nil)
	if _, err := untimed.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("without a timeout the context ends the request: %v", err)
	}
}

func TestFollowsRedirects(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/old" {
			http.Redirect(w, r, "/new", http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	defer srv.Close()
	resp, err := httpclient.New("test", 5*time.Second).Get(srv.URL + "/old")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "/new" {
		t.Errorf("landed on %q, want /new", body)
	}
}
