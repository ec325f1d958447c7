package server

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/prometheus/alertmanager/pkg/labels"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
)

// The alerts and targets in the shapes of Alertmanager's and Prometheus'
// APIs, at their paths, for the tools written for them (Karma, Grafana,
// scripts). The watchdog's own views, with evidence and steps, are under
// /api/v1/watchdog/.

// alertAnnotations are an alert's annotations in both tools' shapes.
func alertAnnotations(a alert.Incident) map[string]string {
	out := map[string]string{"summary": a.Finding.Summary, "description": a.Finding.Diagnosis}
	if a.Finding.Runbook != "" {
		out["runbook_url"] = a.Finding.Runbook
	}
	return out
}

// alertmanagerAlerts serves the firing alerts as Alertmanager's
// GET /api/v2/alerts does, with the labels silences match them on
// (eval.AlertLabels). An alert a silence mutes is "suppressed", silenced
// by it. Nothing is inhibited, nothing is routed to Alertmanager receivers
// (receivers is empty), and a firing alert's end is not known (endsAt is
// the zero time). Pending alerts have not fired and resolved ones have
// ended: Alertmanager holds neither.
func (s *Server) alertmanagerAlerts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var filter labels.Matchers
	for _, raw := range q["filter"] {
		m, err := labels.ParseMatcher(raw)
		if err != nil {
			writeStatusJSON(w, http.StatusBadRequest, fmt.Sprintf("filter: %q is not a matcher like replica=\"sim-0\": %v", raw, err))
			return
		}
		filter = append(filter, m)
	}
	show := map[string]bool{}
	// inhibited and unprocessed select nothing here, but a wrong value is
	// still an error, as in Alertmanager.
	for _, name := range []string{"active", "silenced", "inhibited", "unprocessed"} {
		v, err := queryBool(q, name)
		if err != nil {
			writeStatusJSON(w, http.StatusBadRequest, err.Error())
			return
		}
		show[name] = v
	}
	out := models.GettableAlerts{}
	for _, a := range s.opts.Alerts.Alerts() {
		if a.State != alert.StateFiring {
			continue
		}
		state := models.AlertStatusStateActive
		if len(a.SilencedBy) > 0 {
			state = models.AlertStatusStateSuppressed
		}
		if (state == models.AlertStatusStateActive && !show["active"]) || (state == models.AlertStatusStateSuppressed && !show["silenced"]) {
			continue
		}
		lset := models.LabelSet{}
		for k, v := range eval.AlertLabels(a) {
			if v != "" {
				lset[k] = v
			}
		}
		if !matchesAll(filter, lset) {
			continue
		}
		startsAt := a.FiredAt
		if startsAt.IsZero() {
			startsAt = a.ActiveAt
		}
		out = append(out, &models.GettableAlert{
			Alert:       models.Alert{Labels: lset},
			Annotations: alertAnnotations(a),
			Fingerprint: &a.Fingerprint,
			StartsAt:    ptr(strfmt.DateTime(startsAt)),
			EndsAt:      ptr(strfmt.DateTime(time.Time{})),
			UpdatedAt:   ptr(strfmt.DateTime(a.LastSeen)),
			Receivers:   []*models.ReceiverReference{},
			Status: &models.AlertStatus{
				State: ptr(state), SilencedBy: nonNil(a.SilencedBy), InhibitedBy: []string{}, MutedBy: []string{},
			},
		})
	}
	writeStatusJSON(w, http.StatusOK, out)
}

func matchesAll(ms labels.Matchers, lset map[string]string) bool {
	for _, m := range ms {
		if !m.Matches(lset[m.Name]) {
			return false
		}
	}
	return true
}

// queryBool reads an optional boolean query parameter, true when absent.
func queryBool(q url.Values, name string) (bool, error) {
	if !q.Has(name) {
		return true, nil
	}
	b, err := strconv.ParseBool(q.Get(name))
	if err != nil {
		return false, fmt.Errorf("%s: %q is not true or false", name, q.Get(name))
	}
	return b, nil
}

func ptr[T any](v T) *T { return &v }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// promTarget is a replica in the shape of a target of Prometheus'
// GET /api/v1/targets. The round knows neither the scrape URL nor how long
// the scrape took, so scrapeUrl and lastScrapeDuration are left out
// rather than invented; lastError leads with the failure reason.
type promTarget struct {
	DiscoveredLabels map[string]string `json:"discoveredLabels"`
	Labels           map[string]string `json:"labels"`
	ScrapePool       string            `json:"scrapePool"`
	LastError        string            `json:"lastError"`
	LastScrape       time.Time         `json:"lastScrape"`
	Health           string            `json:"health"`
}

// prometheusTargets serves the replicas of the last round as Prometheus
// serves its targets: {"status":"success","data":{"activeTargets":[...],
// "droppedTargets":[]}}. The watchdog's own view, with snapshot, triage and
// findings, is /api/v1/watchdog/targets.
func (s *Server) prometheusTargets(w http.ResponseWriter, _ *http.Request) {
	active := []promTarget{}
	for _, r := range s.opts.Alerts.Round().Replicas {
		rep, st := r.Replica, r.Scrape
		lset := map[string]string{}
		for k, v := range rep.Labels {
			lset[k] = v
		}
		for k, v := range map[string]string{"replica": rep.Name, "target": rep.Target, "kind": rep.Kind, "model": rep.Model, "engine_type": rep.EngineType} {
			if v != "" {
				lset[k] = v
			}
		}
		t := promTarget{DiscoveredLabels: map[string]string{}, Labels: lset, ScrapePool: rep.Target, LastScrape: st.LastAttempt, Health: "unknown"}
		switch {
		case st.LastAttempt.IsZero():
		case st.Up:
			t.Health = "up"
		default:
			t.Health = "down"
			t.LastError = string(st.Reason)
			if st.Error != "" {
				t.LastError += ": " + st.Error
			}
		}
		active = append(active, t)
	}
	type data struct {
		ActiveTargets  []promTarget `json:"activeTargets"`
		DroppedTargets []promTarget `json:"droppedTargets"`
	}
	writeJSON(w, struct {
		Status string `json:"status"`
		Data   data   `json:"data"`
	}{Status: "success", Data: data{ActiveTargets: active, DroppedTargets: []promTarget{}}})
}

func writeStatusJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	writeJSONBody(w, v)
}
