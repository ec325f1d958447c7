package window

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// The scrape record keeps the typed reason and HTTP status of a failure,
// the outage a success ends, and the newest pod status, whether the scrape
// failed or not.
func TestScrapeStateRecordsOutagesStatusAndPod(t *testing.T) {
	s := newTestStore(t, Options{})
	ok := func(sec float64, pod *series.Pod) {
		t.Helper()
		if err := s.Append(series.Scrape{Target: "r", Kind: "engine", At: at(sec), Pod: pod,
			Groups: []series.Group{{Samples: []series.Sample{smp(series.NumRunningReqs, 1)}}}}); err != nil {
			t.Fatal(err)
		}
	}
	fail := func(sec float64, reason series.ScrapeFailure, status int, pod *series.Pod) {
		t.Helper()
		if err := s.Append(series.Scrape{Target: "r", Kind: "engine", At: at(sec), Reason: reason, Status: status, Pod: pod}); err != nil {
			t.Fatal(err)
		}
	}
	state := func() (st detect.ScrapeState, r detect.Replica) {
		t.Helper()
		if !s.View("r", func(w detect.Window) { st, r = w.Scrape(), w.Replica() }) {
			t.Fatal("no replica r")
		}
		return st, r
	}

	loading := &series.Pod{Name: "r", Phase: "Running"}
	fail(0, series.FailureRefused, 0, loading)
	fail(5, series.FailureRefused, 0, loading)
	st, r := state()
	if st.Reason != series.FailureRefused || st.ConsecutiveFailures != 2 || st.ConsecutiveSuccesses != 0 || !st.LastOutage.From.IsZero() {
		t.Errorf("while refusing: %+v", st)
	}
	if r.Pod != loading {
		t.Errorf("pod of a never-scraped replica %+v, want the loading pod", r.Pod)
	}

	ready := &series.Pod{Name: "r", Phase: "Running", Ready: true}
	ok(10, ready)
	ok(15, nil) // a scrape without pod status keeps the last known one
	st, r = state()
	want := detect.Outage{From: at(0), To: at(10), Failures: 2, Reason: series.FailureRefused}
	if st.LastOutage != want || st.ConsecutiveSuccesses != 2 || st.Reason != "" || st.Status != 0 {
		t.Errorf("after recovery: %+v, want outage %+v and 2 successes", st, want)
	}
	if r.Pod != ready {
		t.Errorf("pod %+v, want the ready pod", r.Pod)
	}

	fail(20, series.FailureHTTPStatus, http.StatusInternalServerError, nil)
	st, _ = state()
	if st.Reason != series.FailureHTTPStatus || st.Status != http.StatusInternalServerError || st.ConsecutiveSuccesses != 0 {
		t.Errorf("after a 500: %+v", st)
	}
	ok(25, nil)
	st, _ = state()
	want = detect.Outage{From: at(20), To: at(25), Failures: 1, Reason: series.FailureHTTPStatus, Status: http.StatusInternalServerError}
	if st.LastOutage != want {
		t.Errorf("second outage %+v, want %+v", st.LastOutage, want)
	}
}

// The window remembers when the pod's restart count went up, also while no
// scrape reaches the process, and forgets it after the retention.
func TestScrapeStateRecordsPodRestarts(t *testing.T) {
	s := newTestStore(t, Options{Retention: time.Hour})
	fail := func(sec float64, restarts int) {
		t.Helper()
		pod := &series.Pod{Name: "p", Restarts: restarts}
		if err := s.Append(series.Scrape{Target: "r", Kind: "engine", At: at(sec), Reason: series.FailureRefused, Pod: pod}); err != nil {
			t.Fatal(err)
		}
	}
	restarts := func() []time.Time {
		var out []time.Time
		s.View("r", func(w detect.Window) { out = w.Scrape().PodRestarts })
		return out
	}
	fail(0, 4) // met with four restarts behind it: not counted
	fail(60, 4)
	fail(120, 5)
	fail(180, 7)
	if got, want := restarts(), []time.Time{at(120), at(180), at(180)}; !slices.Equal(got, want) {
		t.Errorf("pod restarts %v, want %v", got, want)
	}
	fail(3750, 7)
	if got, want := restarts(), []time.Time{at(180), at(180)}; !slices.Equal(got, want) {
		t.Errorf("after the retention: %v, want %v", got, want)
	}
}
