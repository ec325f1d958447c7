package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// pageWorkspace answers every request with the path it got.
type pageWorkspace struct{}

func (pageWorkspace) Patterns() []string { return []string{"GET /{$}", "GET /incidents/{id}"} }
func (pageWorkspace) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, "workspace "+r.URL.Path)
}

func TestWorkspaceServesItsPatternsAndTheAPIStays(t *testing.T) {
	opts := Options{Gatherer: prometheus.NewRegistry(), Alerts: &fakeAlerts{ready: make(chan struct{})}, Logger: zap.NewNop(), Now: time.Now}
	for _, tc := range []struct {
		workspace  bool
		path, want string
		wantStatus int
	}{
		{true, "/", "workspace /", 200},
		{true, "/incidents/abc-1", "workspace /incidents/abc-1", 200},
		{true, "/api/v1/alerts", `"status": "success"`, 200},
		{false, "/", "/api/v1/targets", 200},
		{false, "/incidents/abc-1", "404 page not found", 404},
	} {
		o := opts
		if tc.workspace {
			o.Workspace = pageWorkspace{}
		}
		s := &Server{opts: o}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.wantStatus || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("workspace %v, GET %s: %d %q, want %d with %q", tc.workspace, tc.path, rec.Code, rec.Body.String(), tc.wantStatus, tc.want)
		}
	}
}
