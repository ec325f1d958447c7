package notify

import (
	"reflect"
	"testing"
	"time"
)

func TestBackoffGrowsCapsAndJitters(t *testing.T) {
	tests := []struct {
		name  string
		retry int
		u     float64
		want  time.Duration
	}{
		{name: "first retry, no jitter draw", retry: 1, u: 0, want: 800 * time.Millisecond},
		{name: "first retry, max draw", retry: 1, u: 0.999999999, want: time.Second - 1},
		{name: "third retry doubles twice", retry: 3, u: 0.5, want: 3600 * time.Millisecond},
		{name: "capped", retry: 30, u: 0.5, want: 54 * time.Second},
		{name: "huge retry count stays capped", retry: 5000, u: 0, want: 48 * time.Second},
		{name: "retry below one is the first", retry: 0, u: 0, want: 800 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Backoff(tc.retry, time.Second, time.Minute, tc.u)
			if diff := got - tc.want; diff < -time.Microsecond || diff > time.Microsecond {
				t.Errorf("Backoff(%d, 1s, 1m, %v) = %s, want %s", tc.retry, tc.u, got, tc.want)
			}
			if got > time.Minute {
				t.Errorf("Backoff above cap: %s", got)
			}
		})
	}
}

func TestPlanMakesDeliveriesIdempotent(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	trigger := Event{Fingerprint: "f", Kind: KindTrigger, Status: StatusFiring, StartsAt: start}
	update := Event{Fingerprint: "f", Kind: KindUpdate, Status: StatusFiring, StartsAt: start}
	repeat := Event{Fingerprint: "f", Kind: KindRepeat, Status: StatusFiring, StartsAt: start}
	resolve := Event{Fingerprint: "f", Kind: KindResolve, Status: StatusResolved, StartsAt: start}
	open := &Incident{Open: true, Last: trigger}
	resolved := &Incident{Open: false, Last: resolve}
	older := resolve
	older.StartsAt = start.Add(-time.Hour)
	resolvedOlder := &Incident{Open: false, Last: older}
	tests := []struct {
		name     string
		ev       Event
		inc      *Incident
		wantKind Kind
		wantSend bool
	}{
		{"new trigger", trigger, nil, KindTrigger, true},
		{"re-sent trigger of an open incident is an update", trigger, open, KindUpdate, true},
		{"trigger after resolve reopens", trigger, resolved, KindTrigger, true},
		{"update without record becomes trigger", update, nil, KindTrigger, true},
		{"repeat without record becomes trigger", repeat, nil, KindTrigger, true},
		{"update of open incident stays", update, open, KindUpdate, true},
		{"repeat of open incident stays", repeat, open, KindRepeat, true},
		{"resolve of open incident", resolve, open, KindResolve, true},
		{"resolve without record is still sent", resolve, nil, KindResolve, true},
		{"duplicate resolve skipped", resolve, resolved, KindResolve, false},
		{"resolve of a newer incident than the resolved one is sent", resolve, resolvedOlder, KindResolve, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, send := plan(tc.ev, tc.inc)
			if got.Kind != tc.wantKind || send != tc.wantSend {
				t.Errorf("plan = (%s, %v), want (%s, %v)", got.Kind, send, tc.wantKind, tc.wantSend)
			}
		})
	}
}

// or carries every field: one it forgot would silently take the default
// whatever the dispatcher is configured with.
func TestQueueOptionsOrFillsEveryZeroField(t *testing.T) {
	var d QueueOptions
	v := reflect.ValueOf(&d).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(i + 1))
	}
	if got := (QueueOptions{}).or(d); got != d {
		t.Errorf("zero.or(d) = %+v, want %+v", got, d)
	}
	own := QueueOptions{MaxPending: 7, NoticeRetention: time.Hour}
	want := d
	want.MaxPending, want.NoticeRetention = 7, time.Hour
	if got := own.or(d); got != want {
		t.Errorf("own.or(d) = %+v, want %+v: set fields must win", got, want)
	}
}
