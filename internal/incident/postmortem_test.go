package incident

import (
	"strings"
	"testing"
	"time"
)

// The impact's abort line gives a peak and a total only when requests were
// aborted; a "peak 0/s at 00:04" reads as an event that did not happen.
func TestPostmortemAbortsLine(t *testing.T) {
	at := time.Date(2000, 1, 1, 0, 4, 0, 0, time.UTC)
	record := func(rates ...float64) Record {
		s := Signal{Name: ImpactAborts, Unit: "/s"}
		for i, v := range rates {
			s.Points = append(s.Points, Point{At: at.Add(time.Duration(i) * time.Minute), Value: v})
		}
		return Record{Summary: Summary{Class: "preempt_storm", OpenedAt: at, ResolvedAt: at.Add(3 * time.Minute)}, Impact: []Signal{s}}
	}
	none := func(string) (string, bool) { return "", false }
	for _, tt := range []struct {
		name  string
		rates []float64
		want  string
	}{
		{"none aborted", []float64{0, 0, 0}, "- Aborted requests: none seen during the incident.\n"},
		{"some aborted", []float64{0, 2, 0}, "- Aborted requests: peak 2/s at 00:05:00;"},
	} {
		if got := Postmortem(record(tt.rates...), none); !strings.Contains(got, tt.want) {
			t.Errorf("%s: postmortem lacks %q:\n%s", tt.name, tt.want, got)
		}
	}
}
