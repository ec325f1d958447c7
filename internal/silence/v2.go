package silence

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/prometheus/alertmanager/pkg/labels"
	"go.uber.org/zap"
)

// Alertmanager's v2 silences API over the same store, so amtool, Grafana
// and Karma manage the watchdog's silences as they manage Alertmanager's:
//
//	GET    /api/v2/silences        ?filter=<matcher>&active=&pending=&expired=
//	POST   /api/v2/silences        models.PostableSilence -> {"silenceID": ...}
//	GET    /api/v2/silence/{id}    models.GettableSilence
//	DELETE /api/v2/silence/{id}    expires it
//
// Errors are a JSON string, as Alertmanager answers them, so its generated
// clients (amtool) show the reason.

func (h *Handler) routeV2(csrf *http.CrossOriginProtection) {
	h.mux.HandleFunc("GET /api/v2/silences", h.v2List)
	h.mux.HandleFunc("GET /api/v2/silence/{id}", h.v2Get)
	h.mux.Handle("POST /api/v2/silences", csrf.Handler(h.bearer(h.v2Create, writeV2Error)))
	h.mux.Handle("DELETE /api/v2/silence/{id}", csrf.Handler(h.bearer(h.v2Expire, writeV2Error)))
}

// v2Patterns are the paths the server routes to the v2 API.
var v2Patterns = []string{"/api/v2/silences", "/api/v2/silence/"}

func writeV2Error(w http.ResponseWriter, code int, msg string) { writeJSON(w, code, msg) }

func (h *Handler) v2List(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter, err := parseFilter(q["filter"])
	if err != nil {
		writeV2Error(w, http.StatusBadRequest, err.Error())
		return
	}
	want := map[State]bool{}
	for _, st := range []State{StateActive, StatePending, StateExpired} {
		v, err := queryBool(q, string(st))
		if err != nil {
			writeV2Error(w, http.StatusBadRequest, err.Error())
			return
		}
		want[st] = v
	}
	out := models.GettableSilences{}
	for _, st := range h.opts.Store.List(h.opts.Now()) {
		if !want[st.State] || !hasMatchers(st.Matchers, filter) {
			continue
		}
		g, err := gettable(st)
		if err != nil {
			h.fail(w, err, writeV2Error)
			return
		}
		out = append(out, g)
	}
	sortGettable(out)
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) v2Get(w http.ResponseWriter, r *http.Request) {
	st, ok := h.opts.Store.Get(r.PathValue("id"), h.opts.Now())
	if !ok {
		writeV2Error(w, http.StatusNotFound, ErrNotFound.Error())
		return
	}
	g, err := gettable(st)
	if err != nil {
		h.fail(w, err, writeV2Error)
		return
	}
	writeJSON(w, http.StatusOK, g)
}

// v2Create adds a silence; one that names the ID of an existing silence
// replaces it, as Alertmanager does when a silence changes (amtool silence
// update): the old one ends now and the answer carries the new ID.
func (h *Handler) v2Create(w http.ResponseWriter, r *http.Request) {
	var ps models.PostableSilence
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&ps); err != nil {
		writeV2Error(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	in, err := fromPostable(&ps)
	if err != nil {
		writeV2Error(w, http.StatusBadRequest, err.Error())
		return
	}
	now := h.opts.Now()
	var st Status
	if ps.ID != "" {
		st, err = h.opts.Store.Replace(ps.ID, in, now)
	} else {
		st, err = h.opts.Store.Add(in, now)
	}
	if err != nil {
		h.fail(w, err, writeV2Error)
		return
	}
	h.opts.Logger.Info("silence created", zap.String("id", st.ID), zap.String("replaces", ps.ID), zap.Strings("matchers", st.Matchers),
		zap.Time("ends_at", st.EndsAt), zap.String("created_by", st.CreatedBy))
	writeJSON(w, http.StatusOK, struct {
		SilenceID string `json:"silenceID"`
	}{st.ID})
}

// v2Expire ends a silence now and answers 200 with no body, as
// Alertmanager does.
func (h *Handler) v2Expire(w http.ResponseWriter, r *http.Request) {
	st, err := h.opts.Store.Expire(r.PathValue("id"), h.opts.Now())
	if err != nil {
		h.fail(w, err, writeV2Error)
		return
	}
	h.opts.Logger.Info("silence expired", zap.String("id", st.ID))
	w.WriteHeader(http.StatusOK)
}

// fromPostable checks a posted silence against Alertmanager's schema
// (every field required but annotations and isEqual) and converts it; the
// store then checks what it checks of every silence. The watchdog's
// silences have no annotations: a silence carrying some is refused rather
// than stored without them.
func fromPostable(ps *models.PostableSilence) (Silence, error) {
	if err := ps.Validate(strfmt.Default); err != nil {
		return Silence{}, &InvalidError{Problems: []string{err.Error()}}
	}
	var problems []string
	if len(ps.Annotations) > 0 {
		problems = append(problems, "annotations: not supported by the watchdog's silences; put the context in comment")
	}
	in := Silence{StartsAt: time.Time(*ps.StartsAt), EndsAt: time.Time(*ps.EndsAt), CreatedBy: *ps.CreatedBy, Comment: *ps.Comment}
	for i, m := range ps.Matchers {
		lm, err := labels.NewMatcher(matchType(m), *m.Name, *m.Value)
		if err != nil {
			problems = append(problems, fmt.Sprintf("matchers[%d]: %q is not a valid regular expression: %v", i, *m.Value, err))
			continue
		}
		in.Matchers = append(in.Matchers, lm.String())
	}
	if len(problems) > 0 {
		return Silence{}, &InvalidError{Problems: problems}
	}
	return in, nil
}

func matchType(m *models.Matcher) labels.MatchType {
	equal := m.IsEqual == nil || *m.IsEqual
	switch {
	case *m.IsRegex && equal:
		return labels.MatchRegexp
	case *m.IsRegex:
		return labels.MatchNotRegexp
	case equal:
		return labels.MatchEqual
	default:
		return labels.MatchNotEqual
	}
}

// gettable is st in Alertmanager's shape.
func gettable(st Status) (*models.GettableSilence, error) {
	ms, err := parseMatchers(st.Matchers)
	if err != nil {
		return nil, fmt.Errorf("stored silence %s: %w", st.ID, err)
	}
	out := &models.GettableSilence{
		ID:        &st.ID,
		Status:    &models.SilenceStatus{State: ptr(string(st.State))},
		UpdatedAt: ptr(strfmt.DateTime(st.UpdatedAt)),
		Silence: models.Silence{
			Comment: &st.Comment, CreatedBy: &st.CreatedBy,
			StartsAt: ptr(strfmt.DateTime(st.StartsAt)), EndsAt: ptr(strfmt.DateTime(st.EndsAt)),
			Matchers: models.Matchers{},
		},
	}
	for _, m := range ms {
		out.Matchers = append(out.Matchers, &models.Matcher{
			Name: &m.Name, Value: &m.Value,
			IsRegex: ptr(m.Type == labels.MatchRegexp || m.Type == labels.MatchNotRegexp),
			IsEqual: ptr(m.Type == labels.MatchEqual || m.Type == labels.MatchRegexp),
		})
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }

// sortGettable orders as Alertmanager does: active first, the next to end
// first; then pending, the next to start first; then expired, the most
// recently ended first.
func sortGettable(sils models.GettableSilences) {
	rank := map[string]int{string(StateActive): 0, string(StatePending): 1, string(StateExpired): 2}
	slices.SortStableFunc(sils, func(a, b *models.GettableSilence) int {
		sa, sb := *a.Status.State, *b.Status.State
		if rank[sa] != rank[sb] {
			return rank[sa] - rank[sb]
		}
		switch sa {
		case string(StateActive):
			return time.Time(*a.EndsAt).Compare(time.Time(*b.EndsAt))
		case string(StatePending):
			return time.Time(*a.StartsAt).Compare(time.Time(*b.StartsAt))
		default:
			return time.Time(*b.EndsAt).Compare(time.Time(*a.EndsAt))
		}
	})
}

// parseFilter reads the filter query parameters: matchers such as
// alertname="preempt_storm".
func parseFilter(raw []string) (labels.Matchers, error) {
	ms, err := parseMatchers(raw)
	if err != nil {
		return nil, fmt.Errorf("filter: %w", err)
	}
	return ms, nil
}

// hasMatchers reports whether a silence's matchers include every filter
// matcher, by name, type and value: Alertmanager's filter compares
// definitions, it does not evaluate them.
func hasMatchers(stored []string, filter labels.Matchers) bool {
	for _, f := range filter {
		if !slices.Contains(stored, f.String()) {
			return false
		}
	}
	return true
}

// queryBool reads an optional boolean query parameter, true when absent.
func queryBool(q map[string][]string, name string) (bool, error) {
	v := q[name]
	if len(v) == 0 {
		return true, nil
	}
	b, err := strconv.ParseBool(v[0])
	if err != nil {
		return false, fmt.Errorf("%s: %q is not true or false", name, v[0])
	}
	return b, nil
}
