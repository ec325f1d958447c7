package persist_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore"
	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore/kubetest"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/persist"
)

// kubeCopy is one watchdog copy's writer over its own client of the shared
// state ConfigMap.
type kubeCopy struct {
	w      *persist.Writer
	store  *kubestore.Store
	cancel context.CancelFunc
	done   chan struct{}
}

func startKube(t *testing.T, api *kubetest.API, name string) *kubeCopy {
	t.Helper()
	store, err := kubestore.New(api.Client(name), kubestore.Options{Namespace: "watchdog", ReadOnly: true, Timeout: time.Minute}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w := persist.New(store, persist.Options{Order: []string{"notify-*", "alerts"}, RetryInitial: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	c := &kubeCopy{w: w, store: store, cancel: cancel, done: make(chan struct{})}
	go func() { _ = w.Run(ctx); close(c.done) }()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

func stored(t *testing.T, api *kubetest.API, name string) string {
	t.Helper()
	cm, err := api.Client("check").CoreV1().ConfigMaps("watchdog").Get(context.Background(), kubestore.DefaultName, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return cm.Data[name]
}

// The HA hand-over through the real ConfigMap store: a leader whose writes
// hang on the API server loses the lease; SetWritable(false) aborts its
// write and drops what it had not written, the new leader writes its own
// state, and when the old leader's API access comes back and it leads
// again, it neither writes its stale versions nor reads them back: Load
// returns what the other leader wrote.
func TestLeaderThatLosesTheLeaseNeverWritesItsStaleState(t *testing.T) {
	api := kubetest.NewAPI()
	a, b := startKube(t, api, "a"), startKube(t, api, "b")
	if a.store.Writable() {
		t.Fatal("the store should start read-only")
	}
	if err := a.w.Save("alerts", doc{V: []int{0}}); err != nil {
		t.Fatal(err)
	}
	if got := load(t, a.w, "alerts"); got != "[]" {
		t.Fatalf("a follower's writer kept its save: %s", got)
	}

	a.w.SetWritable(true)
	if !a.store.Writable() {
		t.Fatal("SetWritable(true) did not reach the store")
	}
	a.w.Save("notify-slack", doc{V: []int{1}})
	if !api.Await(10*time.Second, func() bool { return stored(t, api, "notify-slack") == `{"v":[1]}` }) {
		t.Fatal("the leader's first version never reached the ConfigMap")
	}

	// The API server stops answering a: its next write keeps failing
	// (and retrying inside the store) until the lease is lost.
	tried := make(chan struct{}, 1)
	api.FailWith("a", func(verb, _ string) error {
		if verb == "update" || verb == "create" {
			select {
			case tried <- struct{}{}:
			default:
			}
		}
		return errors.New("dial tcp 10.96.0.1:443: i/o timeout")
	})
	a.w.Save("notify-slack", doc{V: []int{2}})
	a.w.Save("alerts", doc{V: []int{2}})
	<-tried
	switched := make(chan struct{})
	go func() { a.w.SetWritable(false); close(switched) }()
	select {
	case <-switched:
	case <-time.After(10 * time.Second): // a guard: the store's timeout is a minute
		t.Fatal("SetWritable(false) waited for the write under way instead of aborting it")
	}

	b.w.SetWritable(true)
	b.w.Save("notify-slack", doc{V: []int{100}})
	b.w.Save("alerts", doc{V: []int{100}})
	if !api.Await(10*time.Second, func() bool { return stored(t, api, "alerts") == `{"v":[100]}` }) {
		t.Fatal("the new leader's state never reached the ConfigMap")
	}
	b.w.SetWritable(false) // b steps down; a leads again, with its API access back
	api.FailWith("a", nil)
	a.w.SetWritable(true)
	for _, name := range []string{"notify-slack", "alerts"} {
		if got := load(t, a.w, name); got != "[100]" {
			t.Errorf("a reads %s = %s at takeover, want b's [100]", name, got)
		}
	}
	// A barrier: ranked last, it is written after anything a still held.
	a.w.Save("incidents", doc{V: []int{3}})
	if !api.Await(10*time.Second, func() bool { return stored(t, api, "incidents") == `{"v":[3]}` }) {
		t.Fatal("a's new save never reached the ConfigMap")
	}
	for _, name := range []string{"notify-slack", "alerts"} {
		if got := stored(t, api, name); got != `{"v":[100]}` {
			t.Errorf("ConfigMap %s = %s, want b's version: a wrote its stale one", name, got)
		}
	}
}
