package silence

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// documentStore serves one state document's bytes, decoded as the state
// directory decodes it.
type documentStore []byte

func (d documentStore) Load(_ string, v any, _ time.Time) error { return json.Unmarshal(d, v) }
func (documentStore) Save(string, any) error                    { return nil }

// FuzzLoadDocument loads arbitrary bytes as the saved silences (a document
// a hand edit or another version may have left). Nothing may panic, and
// whatever is loaded must not mute an alert that no matcher names: a
// corrupt document must never silence every page.
func FuzzLoadDocument(f *testing.F) {
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	good, err := json.Marshal([]Silence{{ID: "a", Matchers: []string{`replica="sim-0"`}, StartsAt: at, EndsAt: at.Add(time.Hour), CreatedBy: "ana"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`[{"id":"b","matchers":[],"starts_at":"2026-12-02T00:00:00Z","ends_at":"2026-12-04T00:00:00Z"}]`))
	f.Add([]byte(`[{"id":"c","matchers":["replica=~\".*\""],"starts_at":"2026-12-02T00:00:00Z","ends_at":"2026-12-04T00:00:00Z"}]`))
	f.Add([]byte(`[{"id":"d","matchers":["replica!=\"x\""],"ends_at":"9999-12-31T00:00:00Z"}]`))
	f.Add([]byte(`[{"matchers":["{{"]}]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		opts := DefaultOptions()
		opts.Persister = documentStore(data)
		s := New(opts, prometheus.NewRegistry())
		_ = s.Load(at) // an error names what was dropped; the rest is kept
		if ids := s.Mutes(map[string]string{}, at); len(ids) > 0 {
			t.Fatalf("loaded silences %v mute an alert without labels", ids)
		}
		s.Mutes(map[string]string{"replica": "sim-0", "class": "preempt_storm", "incident": "x"}, at)
		s.List(at)
		s.Sweep(at.Add(24 * time.Hour))
	})
}
