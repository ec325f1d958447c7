package ui

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/incident"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// documentStore serves one state document's bytes, decoded as the state
// directory decodes it.
type documentStore []byte

func (d documentStore) Load(_ string, v any, _ time.Time) error { return json.Unmarshal(d, v) }
func (documentStore) Save(string, any) error                    { return nil }

type noAlerts struct{}

func (noAlerts) Alerts() []alert.Incident { return nil }
func (noAlerts) Round() assess.Round      { return assess.Round{} }

type noWindows struct{}

func (noWindows) View(string, func(detect.Window)) bool { return false }

// FuzzIncidentDocument loads arbitrary bytes as the saved incident journal
// (a state document a previous version, a full disk or a hand edit may
// have left) and renders every record it kept: the incident page and, for a
// resolved one, the postmortem draft. Nothing may panic and no page may
// answer 5xx: on-call opens these pages from a page in the middle of an
// incident.
func FuzzIncidentDocument(f *testing.F) {
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	full := incident.Record{Summary: incident.Summary{ID: "fp-1", Fingerprint: "fp", Class: detect.PreemptStorm, Replica: "sim-0", Replicas: []string{"sim-0"},
		State: alert.StateResolved, Severity: detect.Critical, OpenedAt: at, FiredAt: at.Add(time.Minute), ResolvedAt: at.Add(10 * time.Minute),
		Chain: []detect.Class{detect.PreemptStorm, detect.ErrorRate}},
		Signals: []incident.Signal{{Name: "retractions/s", Points: []incident.Point{
			{At: at, Value: 0.5, Baseline: 0.01, Limit: 0.05, HasLimit: true}, {At: at.Add(time.Minute), Value: 2, Baseline: 0.01}}}},
		Timeline: []incident.Event{{At: at, Kind: incident.EventFirstFinding, Text: "found"}}}
	seed, err := json.Marshal([]incident.Record{full, {Summary: incident.Summary{ID: "open", State: alert.StateFiring, OpenedAt: at}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`[{"id":"x","state":"resolved","signals":[{"name":"s","points":[{"value":1e308},{"value":-1e308}]}]}]`))
	f.Add([]byte(`[{"id":"x","opened_at":"0001-01-01T00:00:00Z","resolved_at":"9999-12-31T23:59:59Z","state":"resolved"}]`))
	f.Add([]byte(`[{"id":"../x?y#z","state":"bogus","chain":[""],"replicas":null}]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		j := incident.New(incident.Options{Retention: 30 * 24 * time.Hour, MaxIncidents: 200, MaxPoints: 120, Store: documentStore(data)}, nil, at)
		h, err := New(Options{Alerts: noAlerts{}, Windows: noWindows{}, Incidents: j})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range j.Incidents() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/incidents/"+url.PathEscape(r.ID), nil))
			if rec.Code >= 500 {
				t.Fatalf("incident %q: %d\n%s", r.ID, rec.Code, rec.Body)
			}
			if !r.Open() {
				incident.Postmortem(r, func(string) (string, bool) { return "", false })
			}
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
		if rec.Code >= 500 {
			t.Fatalf("fleet page: %d\n%s", rec.Code, rec.Body)
		}
	})
}
