package fleetbench

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A profile the daemon refuses or cuts off is an error and leaves no file:
// Run then reports the measurement without it.
func TestProfileFailureLeavesNoFile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/debug/pprof/profile":
			http.Error(w, "Could not enable CPU profiling: cpu profiling already in use", http.StatusInternalServerError)
		case "/debug/pprof/heap":
			// Half a body: the connection ends before Content-Length.
			w.Header().Set("Content-Length", "1000")
			w.Write([]byte("partial profile"))
			w.(http.Flusher).Flush()
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		default:
			w.Write([]byte("whole profile"))
		}
	}))
	defer srv.Close()
	c := &child{name: "watchdog", addr: srv.Listener.Addr().(*net.TCPAddr).String(), client: srv.Client()}
	dir := t.TempDir()

	for _, tc := range []struct{ path, want string }{
		{"/debug/pprof/profile?seconds=1", "HTTP 500: Could not enable CPU profiling"},
		{"/debug/pprof/heap?gc=1", "unexpected EOF"},
	} {
		file := filepath.Join(dir, "p.pb.gz")
		err := c.profile(t.Context(), tc.path, file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.path, err, tc.want)
		}
		if _, statErr := os.Stat(file); !os.IsNotExist(statErr) {
			t.Errorf("%s: a failed profile left %s behind (%v)", tc.path, file, statErr)
		}
	}

	file := filepath.Join(dir, "ok.pb.gz")
	if err := c.profile(t.Context(), "/debug/pprof/allocs", file); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "whole profile" {
		t.Errorf("saved %q, %v; want the whole body", b, err)
	}
}
