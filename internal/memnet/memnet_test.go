package memnet_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/memnet"
)

// A real HTTP client and server talk over the network inside a bubble, and
// the bubble's clock advances while they wait on each other: a handler that
// takes an hour is cut off by the client's 5 s timeout after exactly 5 s of
// virtual time.
func TestHTTPInBubbleAdvancesVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := memnet.New()
		defer n.Close()
		ln, err := n.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/fast", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello from "+r.Host) })
		mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(time.Hour):
			case <-r.Context().Done():
			}
		})
		srv := &http.Server{Handler: mux}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()

		client := &http.Client{Transport: &http.Transport{DialContext: n.DialContext}, Timeout: 5 * time.Second}
		url := "http://" + ln.Addr().String()
		resp, err := client.Get(url + "/fast")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := "hello from " + ln.Addr().String(); string(body) != want {
			t.Errorf("body %q, want %q", body, want)
		}

		start := time.Now()
		_, err = client.Get(url + "/slow")
		if err == nil {
			t.Fatal("slow request succeeded")
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("slow request: %v, want a timeout", err)
		}
		if got := time.Since(start); got != 5*time.Second {
			t.Errorf("timed out after %v of virtual time, want 5s", got)
		}

		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
		client.CloseIdleConnections()
	})
}

// A dial where nothing listens is refused the way TCP refuses it, so code
// that classifies transport errors treats both alike.
func TestDialWithoutListenerIsRefused(t *testing.T) {
	n := memnet.New()
	defer n.Close()
	if _, err := n.DialContext(context.Background(), "tcp", "127.0.0.1:9"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial to nothing: %v, want ECONNREFUSED", err)
	}
	ln, err := n.Listen("tcp", "127.0.0.1:9")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	if _, err := n.DialContext(context.Background(), "tcp", "127.0.0.1:9"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial after the listener closed: %v, want ECONNREFUSED", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept on a closed listener: %v, want net.ErrClosed", err)
	}
}

func TestListenAddresses(t *testing.T) {
	n := memnet.New()
	defer n.Close()
	a, err := n.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr().String() == b.Addr().String() {
		t.Errorf("two :0 listeners share %s", a.Addr())
	}
	if _, port, _ := net.SplitHostPort(a.Addr().String()); port == "0" {
		t.Errorf("listener kept port 0: %s", a.Addr())
	}
	if _, err := n.Listen("tcp", a.Addr().String()); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second listener on %s: %v, want EADDRINUSE", a.Addr(), err)
	}
	if _, err := n.Listen("udp", "127.0.0.1:0"); err == nil {
		t.Error("udp listener accepted")
	}
	if _, err := n.Listen("tcp", "no-port"); err == nil {
		t.Error("address without a port accepted")
	}
}

// With the accept queue full a dial waits, and gives up with its context.
func TestDialWaitsForAcceptUntilContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := memnet.New()
		defer n.Close()
		ln, err := n.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		var queued []net.Conn
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			c, err := n.DialContext(ctx, "tcp", ln.Addr().String())
			cancel()
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("dial with a full queue: %v, want the context's deadline", err)
				}
				break
			}
			queued = append(queued, c)
			if len(queued) > 1000 {
				t.Fatal("the accept queue never fills")
			}
		}
		if len(queued) == 0 {
			t.Fatal("no dial was queued")
		}
		// Closing the listener resets what it never accepted.
		ln.Close()
		if _, err := queued[0].Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("read on a connection never accepted: %v, want EOF", err)
		}
	})
}

// Closing the network ends every connection, so goroutines blocked reading
// one return and a bubble can end.
func TestCloseEndsConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := memnet.New()
		ln, err := n.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c, err := n.DialContext(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if s.RemoteAddr().String() != c.LocalAddr().String() || c.RemoteAddr().String() != ln.Addr().String() {
			t.Errorf("addresses: server sees %s, client is %s and reached %s", s.RemoteAddr(), c.LocalAddr(), c.RemoteAddr())
		}
		readErr := make(chan error, 1)
		go func() {
			_, err := s.Read(make([]byte, 1))
			readErr <- err
		}()
		synctest.Wait()
		n.Close()
		if err := <-readErr; err == nil {
			t.Error("read returned no error after the network closed")
		}
		if _, err := n.Listen("tcp", "127.0.0.1:0"); err == nil {
			t.Error("listen on a closed network succeeded")
		}
	})
}
