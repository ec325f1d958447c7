package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// pipeListener hands the server in-memory connections, so that the
// server's deadlines run on the synctest bubble's fake clock.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

func (l *pipeListener) dial() net.Conn {
	client, server := net.Pipe()
	l.conns <- server
	return client
}

// servePipes runs the daemon's HTTP server, as New builds it, on in-memory
// connections until the test ends.
func servePipes(t *testing.T, reg *prometheus.Registry) *pipeListener {
	t.Helper()
	s, err := New("127.0.0.1:0", Options{Gatherer: reg, Logger: zap.NewNop(), Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	s.ln.Close() // the real listener is not used
	l := newPipeListener()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.srv.Serve(l)
	}()
	t.Cleanup(func() {
		s.srv.Close()
		<-done
	})
	return l
}

// closedAfter reads from c until the server closes it and returns how long
// that took on the bubble's clock.
func closedAfter(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	start := time.Now()
	_, err := io.Copy(io.Discard, c)
	if err != nil && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("read: %v", err)
	}
	return time.Since(start)
}

func TestServerCutsStalledAndIdleClients(t *testing.T) {
	t.Run("headers never finish", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := servePipes(t, prometheus.NewRegistry())
			c := l.dial()
			defer c.Close()
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: watchdog\r\n"); err != nil {
				t.Fatal(err)
			}
			if d := closedAfter(t, c); d != readHeaderTimeout {
				t.Errorf("connection closed after %s, want the read-header timeout %s", d, readHeaderTimeout)
			}
		})
	})
	t.Run("body never finishes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := servePipes(t, prometheus.NewRegistry())
			c := l.dial()
			defer c.Close()
			stop := make(chan struct{})
			trickled := make(chan struct{})
			go func() {
				defer close(trickled)
				// Headers promise a body that trickles in far too slowly.
				io.WriteString(c, "POST /-/reload HTTP/1.1\r\nHost: watchdog\r\nContent-Length: 1000\r\n\r\n")
				for range 1000 {
					select {
					case <-stop:
						return
					case <-time.After(time.Second):
					}
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}()
			d := closedAfter(t, c)
			close(stop)
			<-trickled
			if d > readTimeout {
				t.Errorf("connection closed after %s, want at most the read timeout %s", d, readTimeout)
			}
		})
	})
	t.Run("idle keep-alive connection", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := servePipes(t, prometheus.NewRegistry())
			c := l.dial()
			defer c.Close()
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: watchdog\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Close {
				t.Fatalf("status %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
			}
			start := time.Now()
			io.Copy(io.Discard, br)
			if d := time.Since(start); d != idleTimeout {
				t.Errorf("idle connection closed after %s, want the idle timeout %s", d, idleTimeout)
			}
		})
	})
	t.Run("client never reads the response", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l := servePipes(t, bigRegistry(t, 2<<20))
			c := l.dial()
			defer c.Close()
			if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: watchdog\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			<-time.After(writeTimeout + time.Second)
			// The server gave up writing: what it buffered is readable,
			// then the connection ends well short of the whole body.
			n, _ := io.Copy(io.Discard, c)
			if n >= 2<<20 {
				t.Errorf("read %d bytes after the write timeout, want the response cut", n)
			}
			if d := time.Since(start); d > writeTimeout+time.Second {
				t.Errorf("connection still open %s after the request", d)
			}
		})
	})
}

// A scraper reading a large /metrics (2 MiB, more than a big fleet's
// watchdog exports) at 64 KiB/s gets all of it: the write timeout does not
// cut normal scrapes.
func TestWriteTimeoutLeavesRoomForLargeMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 2 << 20
		l := servePipes(t, bigRegistry(t, size))
		c := l.dial()
		defer c.Close()
		if _, err := io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: watchdog\r\nAccept-Encoding: identity\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := http.ReadResponse(bufio.NewReaderSize(&slowReader{r: c, chunk: 64 << 10, every: time.Second}, 64<<10), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("after %d bytes in %s: %v", len(body), time.Since(start), err)
		}
		if resp.StatusCode != http.StatusOK || len(body) < size || !strings.HasSuffix(string(body), "\n") {
			t.Errorf("status %d, %d bytes, want the whole exposition (>= %d bytes)", resp.StatusCode, len(body), size)
		}
		if d := time.Since(start); d < 30*time.Second || d > writeTimeout {
			t.Errorf("the slow read took %s; the test means to take 30s..%s", d, writeTimeout)
		}
	})
}

// slowReader reads at most chunk bytes per interval.
type slowReader struct {
	r     io.Reader
	chunk int
	every time.Duration
	left  int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.left == 0 {
		<-time.After(s.every)
		s.left = s.chunk
	}
	if len(p) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= n
	return n, err
}

// bigRegistry exports at least size bytes of text exposition.
func bigRegistry(t *testing.T, size int) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "watchdog_test_series", Help: "Filler."}, []string{"replica", "detail"})
	reg.MustRegister(g)
	pad := strings.Repeat("p", 60)
	for i := range size/100 + 1 {
		g.WithLabelValues(fmt.Sprintf("replica-%06d", i), pad).Set(float64(i))
	}
	return reg
}
