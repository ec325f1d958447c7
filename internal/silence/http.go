package silence

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
)

// HandlerOptions configure the HTTP API and the HTML pages.
type HandlerOptions struct {
	Store *Store
	// Token is the bearer token mutations need; "" turns mutations off
	// (403, saying how to enable them). It is never logged or echoed.
	Token string
	// Standby reports whether this copy is an HA follower, which refuses
	// mutations (503): only the leader writes the shared state. nil: never.
	Standby func() bool
	// Now reads the clock for states and new silences; main passes time.Now.
	Now    func() time.Time
	Logger *zap.Logger
	// PathPrefix starts the pages' links, form actions and redirects: the
	// path a browser sees the daemon under ("/watchdog" behind an Ingress
	// path, "" at the root). The routes are unprefixed: the server strips
	// its route prefix first.
	PathPrefix string
}

// maxBodyBytes bounds a request body: a silence is a few hundred bytes.
const maxBodyBytes = 64 << 10

// Handler serves the silences API (/api/v1/silences, and Alertmanager's
// /api/v2/silences in v2.go) and pages (/silences).
type Handler struct {
	opts HandlerOptions
	mux  *http.ServeMux
}

// NewHandler routes the silence endpoints. Mutating ones refuse
// cross-origin browser requests (http.CrossOriginProtection), need the
// token, and are refused on a standby copy.
func NewHandler(opts HandlerOptions) *Handler {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	h := &Handler{opts: opts, mux: http.NewServeMux()}
	csrf := http.NewCrossOriginProtection()
	h.mux.HandleFunc("GET /api/v1/silences", h.list)
	h.mux.HandleFunc("GET /api/v1/silences/{id}", h.get)
	h.mux.Handle("POST /api/v1/silences", csrf.Handler(h.bearer(h.create, writeError)))
	h.mux.Handle("DELETE /api/v1/silences/{id}", csrf.Handler(h.bearer(h.expire, writeError)))
	h.routeV2(csrf)
	h.mux.HandleFunc("GET /silences", h.listPage)
	h.mux.HandleFunc("GET /silences/new", h.newPage)
	h.mux.Handle("POST /silences/new", csrf.Handler(http.HandlerFunc(h.createForm)))
	h.mux.Handle("POST /silences/{id}/expire", csrf.Handler(http.HandlerFunc(h.expireForm)))
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Patterns are the paths the server must route to the handler.
func Patterns() []string {
	return append([]string{"/api/v1/silences", "/api/v1/silences/", "/silences", "/silences/"}, v2Patterns...)
}

// authorize checks a presented token; it returns the status and message
// to answer with, or 0 when the request may change silences.
func (h *Handler) authorize(presented string) (int, string) {
	if h.opts.Token == "" {
		return http.StatusForbidden, "changing silences is disabled: set api.token_file (or WATCHDOG_API_TOKEN_FILE) to a file holding a bearer token and restart the daemon"
	}
	if subtle.ConstantTimeCompare([]byte(presented), []byte(h.opts.Token)) != 1 {
		return http.StatusUnauthorized, "missing or wrong token: send Authorization: Bearer <the token in api.token_file>"
	}
	if h.opts.Standby != nil && h.opts.Standby() {
		return http.StatusServiceUnavailable, "this copy is an HA follower: change silences on the leader (the Service routes to it once it is ready)"
	}
	return 0, ""
}

// bearer lets a request through to next when it carries the token;
// otherwise it answers with writeErr, in the shape of the API called.
func (h *Handler) bearer(next http.HandlerFunc, writeErr func(http.ResponseWriter, int, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if code, msg := h.authorize(token); code != 0 {
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sglang-watchdog"`)
			}
			writeErr(w, code, msg)
			return
		}
		next(w, r)
	})
}

// Request is the body of POST /api/v1/silences.
type Request struct {
	Matchers  []string  `json:"matchers"`
	StartsAt  time.Time `json:"starts_at,omitzero"` // zero: now
	EndsAt    time.Time `json:"ends_at"`
	CreatedBy string    `json:"created_by"`
	Comment   string    `json:"comment"`
}

func (h *Handler) list(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"silences": h.opts.Store.List(h.opts.Now())})
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	st, ok := h.opts.Store.Get(r.PathValue("id"), h.opts.Now())
	if !ok {
		writeError(w, http.StatusNotFound, ErrNotFound.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	var req Request
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	st, err := h.opts.Store.Add(Silence{Matchers: req.Matchers, StartsAt: req.StartsAt, EndsAt: req.EndsAt, CreatedBy: req.CreatedBy, Comment: req.Comment}, h.opts.Now())
	if err != nil {
		h.fail(w, err, writeError)
		return
	}
	h.opts.Logger.Info("silence created", zap.String("id", st.ID), zap.Strings("matchers", st.Matchers),
		zap.Time("ends_at", st.EndsAt), zap.String("created_by", st.CreatedBy))
	writeJSON(w, http.StatusCreated, st)
}

func (h *Handler) expire(w http.ResponseWriter, r *http.Request) {
	st, err := h.opts.Store.Expire(r.PathValue("id"), h.opts.Now())
	if err != nil {
		h.fail(w, err, writeError)
		return
	}
	h.opts.Logger.Info("silence expired", zap.String("id", st.ID))
	writeJSON(w, http.StatusOK, st)
}

// status maps a store error to its HTTP status.
func status(err error) int {
	var invalid *InvalidError
	switch {
	case errors.As(err, &invalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrAlreadyExpired):
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

// fail answers a store error with writeErr, in the shape of the API
// called.
func (h *Handler) fail(w http.ResponseWriter, err error, writeErr func(http.ResponseWriter, int, string)) {
	code := status(err)
	if code == http.StatusInternalServerError {
		h.opts.Logger.Error("changing silences failed", zap.Error(err))
	}
	writeErr(w, code, err.Error())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// errorOf reads the error message of an API answer (the client's view).
func errorOf(code int, body []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return fmt.Errorf("%d %s: %s", code, http.StatusText(code), e.Error)
	}
	return fmt.Errorf("%d %s: %s", code, http.StatusText(code), strings.TrimSpace(string(body)))
}
