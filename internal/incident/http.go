package incident

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
)

// Routes are the patterns Handler serves; the server mounts the handler
// on exactly these (the incident page itself, /incidents/{id}, belongs to
// the workspace pages).
var Routes = []string{
	"GET /api/v1/incidents",
	"GET /api/v1/incidents/{id}",
	"GET /incidents/{id}/postmortem",
	"GET /incidents/{id}/postmortem.md",
}

func summarize(r Record) Summary {
	s := r.Summary
	s.Replicas, s.Chain, s.SilencedBy = slices.Clone(r.Replicas), slices.Clone(r.Chain), slices.Clone(r.SilencedBy)
	if !r.Open() {
		s.Postmortem = alert.PostmortemPath(r.ID)
	}
	return s
}

// Handler serves the incident API and the postmortem drafts from rd.
// runbooks gives the runbook's checks for a class (RunbookChecks); nil:
// the postmortem leaves that section out.
func Handler(rd Reader, runbooks RunbookChecks) http.Handler {
	h := &handler{rd: rd, runbooks: runbooks}
	mux := http.NewServeMux()
	mux.HandleFunc(Routes[0], h.list)
	mux.HandleFunc(Routes[1], h.one)
	mux.HandleFunc(Routes[2], h.postmortemHTML)
	mux.HandleFunc(Routes[3], h.postmortemMarkdown)
	return mux
}

type handler struct {
	rd       Reader
	runbooks RunbookChecks
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	state, model := r.URL.Query().Get("state"), r.URL.Query().Get("model")
	switch alert.State(state) {
	case "", alert.StatePending, alert.StateFiring, alert.StateResolved:
	default:
		http.Error(w, fmt.Sprintf("state=%q: must be pending, firing or resolved", state), http.StatusBadRequest)
		return
	}
	out := []Summary{}
	for _, rec := range h.rd.Incidents() {
		if (state == "" || string(rec.State) == state) && (model == "" || rec.Model == model) {
			out = append(out, summarize(rec))
		}
	}
	writeJSON(w, map[string]any{"incidents": out})
}

func (h *handler) one(w http.ResponseWriter, r *http.Request) {
	rec, ok := h.rd.Incident(r.PathValue("id"))
	if !ok {
		notFound(w, r.PathValue("id"))
		return
	}
	writeJSON(w, rec)
}

func notFound(w http.ResponseWriter, id string) {
	http.Error(w, fmt.Sprintf("no incident %q in the journal (never opened, or past its retention)", id), http.StatusNotFound)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
