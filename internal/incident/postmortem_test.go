package incident

import (
	"strings"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
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

// An impact line's peak is read during the incident: the round before it
// is the reference, and a value no higher than that reference is said to
// be so, not given as a peak at a moment before the incident began.
func TestPostmortemImpactPeakIsDuringTheIncident(t *testing.T) {
	opened := time.Date(2000, 1, 1, 0, 4, 0, 0, time.UTC)
	record := func(values ...float64) Record {
		s := Signal{Name: ImpactITL, Unit: "s"}
		for i, v := range values {
			s.Points = append(s.Points, Point{At: opened.Add(time.Duration(i-1) * time.Minute), Value: v})
		}
		return Record{Summary: Summary{Class: "preempt_storm", OpenedAt: opened, ResolvedAt: opened.Add(3 * time.Minute)}, Impact: []Signal{s}}
	}
	none := func(string) (string, bool) { return "", false }
	for _, tt := range []struct {
		name   string
		values []float64
		want   string
	}{
		{"rose", []float64{0.05, 0.2, 0.1}, "- Inter-token latency p99: peak 0.2 s at 00:04:00, against 0.05 s just before the incident (00:03:00).\n"},
		{"never above the round before", []float64{0.165, 0.16, 0.12},
			"- Inter-token latency p99: 0.165 s just before the incident (00:03:00), no higher during it (at most 0.16 s).\n"},
		{"unchanged", []float64{0.165, 0.165}, "- Inter-token latency p99: 0.165 s just before the incident (00:03:00), no higher during it.\n"},
		{"only the round before", []float64{0.165}, "- Inter-token latency p99: 0.165 s just before the incident (00:03:00); not read during it.\n"},
	} {
		if got := Postmortem(record(tt.values...), none); !strings.Contains(got, tt.want) {
			t.Errorf("%s: postmortem lacks %q:\n%s", tt.name, tt.want, got)
		}
	}
	// Without a round before it, the first value is the reference in the
	// same words, named by when it was read: the demo's crash read "Queued
	// requests: peak 0 at 10:00:57, against 0 at the first finding", its
	// first value read 23 s after the first finding, the replica down.
	for _, tt := range []struct {
		name   string
		shift  time.Duration
		values []float64
		want   string
	}{
		{"rose", time.Minute, []float64{0.05, 0.2}, "- Inter-token latency p99: peak 0.2 s at 00:05:00, against 0.05 s at the first finding (00:04:00).\n"},
		{"never rose", time.Minute, []float64{0, 0, 0}, "- Inter-token latency p99: 0 s at the first finding (00:04:00), no higher during it.\n"},
		{"first read later", 2 * time.Minute, []float64{0, 0}, "- Inter-token latency p99: 0 s when first read (00:05:00), no higher during it.\n"},
	} {
		r := record(tt.values...)
		for i := range r.Impact[0].Points {
			r.Impact[0].Points[i].At = r.Impact[0].Points[i].At.Add(tt.shift)
		}
		if got := Postmortem(r, none); !strings.Contains(got, tt.want) {
			t.Errorf("no round before, %s: postmortem lacks %q:\n%s", tt.name, tt.want, got)
		}
	}
}

// The root-cause table's worst value follows the evidence: the lowest for
// a quantity where lower is worse (completions), none for the sample a
// rule rests on (answered requests), the highest otherwise.
func TestPostmortemWorstFollowsTheEvidence(t *testing.T) {
	at := time.Date(2000, 1, 1, 0, 4, 0, 0, time.UTC)
	r := Record{Summary: Summary{Class: "error_rate", OpenedAt: at, ResolvedAt: at.Add(3 * time.Minute)}}
	for i, v := range []float64{8, 2, 6} {
		now := at.Add(time.Duration(i) * time.Minute)
		for _, e := range []detect.Evidence{
			{Name: "completions/s", Value: v, Unit: "/s", LowerWorse: true},
			{Name: "answered requests/s", Value: 10 * v, Unit: "/s", SampleSize: true},
			{Name: "arrivals/s", Value: v, Unit: "/s"},
		} {
			r.addPoint(e, now, 0)
		}
	}
	got := Postmortem(r, func(string) (string, bool) { return "", false })
	for _, want := range []string{
		"| completions/s | 8/s | 2/s at 00:05:00 |",
		"| answered requests/s | 80/s | — (the sample the rule rests on) |",
		"| arrivals/s | 8/s | 8/s at 00:04:00 |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("postmortem lacks %q:\n%s", want, got)
		}
	}
}

// A budget share is of what the SLO memory holds: after a restart without
// history that is minutes of a 28-day period, and the line says so before
// the number is read as the period's ("10% of the error budget of the
// SLO ... (...; 7 min 53 s of its 28 d period on record)").
func TestPostmortemBudgetNamesTheSpanItIsOf(t *testing.T) {
	at := time.Date(2000, 1, 1, 0, 4, 0, 0, time.UTC)
	none := func(string) (string, bool) { return "", false }
	for _, c := range []struct {
		held time.Duration
		want string
	}{
		{28 * 24 * time.Hour, `- Error budget consumed: 10% of the 28 d error budget of the SLO "avail" (availability 99.9%): 40 of 914 events on its replicas outside it during the incident.`},
		{473 * time.Second, `- Error budget consumed: 10% of the error budget of the SLO "avail" (availability 99.9%; 7 min 53 s of its 28 d period on record): 40 of 914 events`},
	} {
		r := Record{Summary: Summary{Class: "preempt_storm", OpenedAt: at, ResolvedAt: at.Add(3 * time.Minute)},
			Budgets: []BudgetSpent{{Objective: "avail", Title: "availability 99.9%", Bad: 40, Total: 914, Allowed: 400,
				Period: 28 * 24 * time.Hour, Held: c.held}}}
		if got := Postmortem(r, none); !strings.Contains(got, c.want) {
			t.Errorf("held %s: postmortem lacks %q:\n%s", c.held, c.want, got)
		}
	}
}
