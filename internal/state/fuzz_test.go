package state

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
)

// FuzzLoadAlerts writes arbitrary bytes as the daemon's alert document and
// loads it as the daemon does at start-up (Dir.Load into the alerts, then
// the tracker restores them and runs rounds past the restore grace).
// Nothing may panic; a document that does not decode is an ErrCorrupt error
// naming the document, and is moved aside so the next start is clean.
func FuzzLoadAlerts(f *testing.F) {
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	saved, err := json.Marshal([]alert.Incident{{Fingerprint: "f1", State: alert.StateFiring, Class: "preempt_storm", Replica: "r1", ActiveAt: at, FiredAt: at, LastSeen: at}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(saved)
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[{"fingerprint":"x","state":"firing","members":null}]`))
	f.Add([]byte(`{"not":"a list"}`))
	f.Add([]byte("\x00\xff garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, eval.AlertsDocument+".json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		d, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		var alerts []alert.Incident
		if err := d.Load(eval.AlertsDocument, &alerts, at); err != nil {
			if !errors.Is(err, ErrCorrupt) || err.Error() == "" {
				t.Fatalf("Load of a bad document: %v, want ErrCorrupt", err)
			}
			if _, statErr := os.Stat(path); !errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("the corrupt document stayed in place: %v", statErr)
			}
			return
		}
		tr := alert.NewTracker(alert.DefaultConfig())
		tr.Restore(alerts, at)
		for k := range 3 {
			tr.Update(assess.Round{At: at.Add(time.Duration(k) * 10 * time.Minute)})
		}
		tr.Incidents()
	})
}
