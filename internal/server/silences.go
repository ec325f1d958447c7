package server

import (
	"net/http"

	"github.com/sglang-watchdog/sglang-watchdog/internal/silence"
)

// routeSilences hands /api/v1/silences and /silences to the silences
// handler, which checks methods, tokens and origins itself.
func (s *Server) routeSilences(mux *http.ServeMux) {
	if s.opts.Silences == nil {
		return
	}
	for _, p := range silence.Patterns() {
		mux.Handle(p, s.opts.Silences)
	}
}
