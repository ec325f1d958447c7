package silence

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newStore(t *testing.T, p Persister) (*Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := DefaultOptions()
	opts.Persister = p
	n := 0
	opts.NewID = func() string { n++; return fmt.Sprintf("id-%d", n) }
	return New(opts, reg), reg
}

func mustAdd(t *testing.T, s *Store, sil Silence, now time.Time) Status {
	t.Helper()
	st, err := s.Add(sil, now)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	return st
}

var alertLabels = map[string]string{"replica": "sim-0", "model": "llama", "class": "preempt_storm", "severity": "critical", "namespace": "serving"}

func TestMutesMatchesAlertmanagerSyntax(t *testing.T) {
	s, _ := newStore(t, nil)
	for _, tc := range []struct {
		matchers []string
		mutes    bool
	}{
		{[]string{`replica="sim-0"`}, true},
		{[]string{`class=~"preempt.*"`, `severity!="info"`}, true},
		{[]string{`namespace="serving"`}, true},
		{[]string{`replica="sim-1"`}, false},
		{[]string{`replica="sim-0"`, `team="infra"`}, false}, // a missing label is ""
		{[]string{`class!~"preempt.*"`, `replica="sim-0"`}, false},
	} {
		st := mustAdd(t, s, Silence{Matchers: tc.matchers, EndsAt: t0.Add(time.Hour), CreatedBy: "ana"}, t0)
		got := len(s.Mutes(alertLabels, t0.Add(time.Minute))) > 0 && contains(s.Mutes(alertLabels, t0.Add(time.Minute)), st.ID)
		if got != tc.mutes {
			t.Errorf("%v mutes %v = %v, want %v", tc.matchers, alertLabels, got, tc.mutes)
		}
	}
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func TestStatesFollowTime(t *testing.T) {
	s, _ := newStore(t, nil)
	st := mustAdd(t, s, Silence{Matchers: []string{`replica="sim-0"`}, StartsAt: t0.Add(time.Hour), EndsAt: t0.Add(2 * time.Hour), CreatedBy: "ana"}, t0)
	if st.State != StatePending {
		t.Fatalf("state = %s, want pending", st.State)
	}
	if ids := s.Mutes(alertLabels, t0.Add(30*time.Minute)); len(ids) != 0 {
		t.Errorf("pending silence mutes: %v", ids)
	}
	if ids := s.Mutes(alertLabels, t0.Add(90*time.Minute)); len(ids) != 1 {
		t.Errorf("active silence does not mute: %v", ids)
	}
	s.Sweep(t0.Add(90 * time.Minute))
	if got := testutil.ToFloat64(s.gauge.WithLabelValues("active")); got != 1 {
		t.Errorf("watchdog_silences{state=active} = %v, want 1", got)
	}
	if ids := s.Mutes(alertLabels, t0.Add(2*time.Hour)); len(ids) != 0 {
		t.Errorf("silence mutes at its end: %v", ids)
	}
	if got, _ := s.Get(st.ID, t0.Add(3*time.Hour)); got.State != StateExpired {
		t.Errorf("state after end = %s", got.State)
	}
}

func TestExpireEndsNowAndOverlapStillMutes(t *testing.T) {
	s, _ := newStore(t, nil)
	a := mustAdd(t, s, Silence{Matchers: []string{`replica="sim-0"`}, EndsAt: t0.Add(time.Hour), CreatedBy: "ana"}, t0)
	b := mustAdd(t, s, Silence{Matchers: []string{`class="preempt_storm"`}, EndsAt: t0.Add(2 * time.Hour), CreatedBy: "bo"}, t0)
	if ids := s.Mutes(alertLabels, t0.Add(time.Minute)); len(ids) != 2 {
		t.Fatalf("two overlapping silences: mutes %v", ids)
	}
	exp, err := s.Expire(a.ID, t0.Add(10*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !exp.EndsAt.Equal(t0.Add(10*time.Minute)) || exp.State != StateExpired {
		t.Errorf("expired silence = %+v", exp)
	}
	if ids := s.Mutes(alertLabels, t0.Add(11*time.Minute)); len(ids) != 1 || ids[0] != b.ID {
		t.Errorf("after one of two expired: mutes %v, want [%s]", ids, b.ID)
	}
	if _, err := s.Expire(a.ID, t0.Add(12*time.Minute)); !errors.Is(err, ErrAlreadyExpired) {
		t.Errorf("expiring twice: %v", err)
	}
	if _, err := s.Expire("nope", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("expiring unknown: %v", err)
	}
}

func TestAddRejectsBadInputWithEveryProblem(t *testing.T) {
	s, _ := newStore(t, nil)
	for _, tc := range []struct {
		name string
		in   Silence
		want []string
	}{
		{"no matchers", Silence{EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, []string{"at least one"}},
		{"bad matcher", Silence{Matchers: []string{`replica=~"(("`}, EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, []string{`matchers[0]: "replica=~\"((\""`}},
		{"matches everything", Silence{Matchers: []string{`replica=~".*"`}, EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, []string{"mute everything"}},
		{"end before start", Silence{Matchers: []string{`replica="x"`}, StartsAt: t0.Add(2 * time.Hour), EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, []string{"is not after starts_at"}},
		{"end in the past", Silence{Matchers: []string{`replica="x"`}, StartsAt: t0.Add(-2 * time.Hour), EndsAt: t0.Add(-time.Hour)}, []string{"in the past", "created_by: required"}},
		{"long comment", Silence{Matchers: []string{`replica="x"`}, EndsAt: t0.Add(time.Hour), CreatedBy: "a", Comment: strings.Repeat("x", MaxCommentLength+1)}, []string{"comment: at most"}},
	} {
		_, err := s.Add(tc.in, t0)
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%s: err = %v, want InvalidError", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
	if got := s.List(t0); len(got) != 0 {
		t.Errorf("rejected silences stored: %v", got)
	}
}

func TestStoreIsBounded(t *testing.T) {
	s, _ := newStore(t, nil)
	s.opts.MaxSilences = 2
	for range 2 {
		mustAdd(t, s, Silence{Matchers: []string{`replica="x"`}, EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, t0)
	}
	_, err := s.Add(Silence{Matchers: []string{`replica="x"`}, EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, t0)
	var inv *InvalidError
	if !errors.As(err, &inv) || !strings.Contains(err.Error(), "maximum of 2") {
		t.Fatalf("third silence: %v", err)
	}
	// Expired silences are dropped after the retention, making room.
	later := t0.Add(time.Hour + s.opts.Retention)
	mustAdd(t, s, Silence{Matchers: []string{`replica="x"`}, EndsAt: later.Add(time.Hour), CreatedBy: "a"}, later)
	if n := len(s.List(later)); n != 1 {
		t.Errorf("after retention: %d silences, want 1", n)
	}
}

func TestSilencesSurviveARestart(t *testing.T) {
	dir, err := state.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t, dir)
	st := mustAdd(t, s, Silence{Matchers: []string{`replica="sim-0"`}, EndsAt: t0.Add(time.Hour), CreatedBy: "ana", Comment: "kernel upgrade"}, t0)

	restarted, _ := newStore(t, dir)
	if err := restarted.Load(t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if ids := restarted.Mutes(alertLabels, t0.Add(time.Minute)); len(ids) != 1 || ids[0] != st.ID {
		t.Fatalf("after restart mutes %v, want [%s]", ids, st.ID)
	}
	got, _ := restarted.Get(st.ID, t0.Add(time.Minute))
	if got.Comment != "kernel upgrade" || got.CreatedBy != "ana" {
		t.Errorf("restored silence = %+v", got)
	}
}

type failingSaves struct{}

func (failingSaves) Load(string, any, time.Time) error { return nil }
func (failingSaves) Save(string, any) error            { return errors.New("disk full") }

func TestFailedSaveChangesNothing(t *testing.T) {
	s, _ := newStore(t, failingSaves{})
	if _, err := s.Add(Silence{Matchers: []string{`replica="x"`}, EndsAt: t0.Add(time.Hour), CreatedBy: "a"}, t0); err == nil {
		t.Fatal("Add succeeded though the save failed")
	}
	if n := len(s.List(t0)); n != 0 {
		t.Errorf("%d silences held after a failed save", n)
	}
}

func TestFollowerReloadsTheLeadersSilences(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir, err := state.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		leader, _ := newStore(t, dir)
		follower, _ := newStore(t, dir)
		following := true
		var mu sync.Mutex
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			done <- follower.Follow(ctx, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return following }, func(err error) { t.Error(err) })
		}()
		now := time.Now()
		mustAdd(t, leader, Silence{Matchers: []string{`replica="sim-0"`}, EndsAt: now.Add(time.Hour), CreatedBy: "ana"}, now)
		if ids := follower.Mutes(alertLabels, now); len(ids) != 0 {
			t.Fatalf("follower knew the silence before reloading: %v", ids)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if ids := follower.Mutes(alertLabels, time.Now()); len(ids) != 1 {
			t.Fatalf("follower did not reload: %v", ids)
		}
		// Leading, it no longer reloads: its own changes are the truth.
		mu.Lock()
		following = false
		mu.Unlock()
		mustAdd(t, leader, Silence{Matchers: []string{`replica="sim-0"`}, EndsAt: now.Add(time.Hour), CreatedBy: "bo"}, now)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if ids := follower.Mutes(alertLabels, time.Now()); len(ids) != 1 {
			t.Fatalf("leading copy reloaded: %v", ids)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
