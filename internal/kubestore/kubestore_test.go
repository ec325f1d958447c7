package kubestore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore"
	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore/kubetest"
	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/notifytest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ns = "watchdog"

var (
	_ notify.Store = (*kubestore.Store)(nil)
	_ notify.Store = (*state.Dir)(nil)
)

type doc struct {
	Version int               `json:"version"`
	Items   []string          `json:"items"`
	Refs    map[string]string `json:"refs,omitempty"`
}

func newStore(t *testing.T, c kubernetes.Interface, opts kubestore.Options) (*kubestore.Store, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if opts.Namespace == "" {
		opts.Namespace = ns
	}
	s, err := kubestore.New(c, opts, reg)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

func configMap(t *testing.T, c kubernetes.Interface) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), kubestore.DefaultName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func TestMissingLeavesValueUntouched(t *testing.T) {
	api := kubetest.NewAPI()
	c := api.Client("a")
	s, _ := newStore(t, c, kubestore.Options{})
	v := doc{Version: 7}
	if err := s.Load("notify-slack", &v, time.Now()); err != nil || v.Version != 7 {
		t.Fatalf("no ConfigMap: err %v, v %+v", err, v)
	}
	if err := s.Save("alerts", []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Load("notify-slack", &v, time.Now()); err != nil || v.Version != 7 {
		t.Fatalf("no key: err %v, v %+v", err, v)
	}
}

func TestSaveLoadRoundTripOneKeyPerDocument(t *testing.T) {
	api := kubetest.NewAPI()
	c := api.Client("a")
	s, reg := newStore(t, c, kubestore.Options{})
	want := doc{Version: 1, Items: []string{"a", "b"}, Refs: map[string]string{"ts": "1773480400.000101"}}
	if err := s.Save("notify-slack", want); err != nil {
		t.Fatal(err)
	}
	if err := s.Save("alerts", []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	cm := configMap(t, c)
	if got := cm.Data["notify-slack"]; got != `{"version":1,"items":["a","b"],"refs":{"ts":"1773480400.000101"}}` {
		t.Errorf("stored value %q is not the document's JSON", got)
	}
	if cm.Data["alerts"] != "[1,2]" || len(cm.Data) != 2 {
		t.Errorf("data = %v", cm.Data)
	}
	if cm.Labels["app.kubernetes.io/managed-by"] != "sglang-watchdog" {
		t.Errorf("labels = %v", cm.Labels)
	}
	// A fresh store (a new process) reads it back.
	s2, _ := newStore(t, api.Client("b"), kubestore.Options{})
	var got doc
	if err := s2.Load("notify-slack", &got, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got.Version != 1 || strings.Join(got.Items, ",") != "a,b" || got.Refs["ts"] != want.Refs["ts"] {
		t.Errorf("loaded %+v", got)
	}
	if n := value(t, reg, "watchdog_state_configmap_bytes"); n != float64(len("notify-slack")+len(cm.Data["notify-slack"])+len("alerts")+len("[1,2]")) {
		t.Errorf("bytes gauge = %v", n)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// value reads one gauge or counter from reg.
func value(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s%v not found", name, labels)
	return 0
}

// Undecodable values behave as in the state directory: moved aside to
// "<name>.corrupt-<unix>", ErrCorrupt, v untouched, never fatal. A value
// that is valid JSON of the wrong shape must not leave v half filled.
func TestCorruptIsMovedAside(t *testing.T) {
	for name, raw := range map[string]string{
		"syntax":     `{"version":2,"items":["a"`,
		"wrong type": `{"version":2,"items":"not a list"}`,
	} {
		t.Run(name, func(t *testing.T) {
			api := kubetest.NewAPI()
			c := api.Client("a")
			s, _ := newStore(t, c, kubestore.Options{})
			if err := s.Save("alerts", []int{1}); err != nil {
				t.Fatal(err)
			}
			cm := configMap(t, c)
			cm.Data["notify-pagerduty"] = raw
			if _, err := c.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1773480400, 0)
			v := doc{Version: 9}
			err := s.Load("notify-pagerduty", &v, now)
			if !errors.Is(err, kubestore.ErrCorrupt) || !errors.Is(err, state.ErrCorrupt) {
				t.Fatalf("Load = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), "notify-pagerduty.corrupt-1773480400") {
				t.Errorf("error %q does not say where the value went", err)
			}
			if v.Version != 9 || v.Items != nil {
				t.Errorf("v changed: %+v", v)
			}
			cm = configMap(t, c)
			if _, still := cm.Data["notify-pagerduty"]; still {
				t.Error("corrupt value left under its name")
			}
			if cm.Data["notify-pagerduty.corrupt-1773480400"] != raw || cm.Data["alerts"] != "[1]" {
				t.Errorf("data after move = %v", cm.Data)
			}
			// The next load starts empty without error.
			if err := s.Load("notify-pagerduty", &v, now); err != nil {
				t.Errorf("second Load: %v", err)
			}
		})
	}
}

// A follower must not write the leader's ConfigMap, not even to move a
// corrupt value aside: it reports and leaves it for the leader.
func TestFollowerWritesNothing(t *testing.T) {
	api := kubetest.NewAPI()
	leaderC, followerC := api.Client("leader"), api.Client("follower")
	leader, _ := newStore(t, leaderC, kubestore.Options{})
	if err := leader.Save("notify-slack", doc{Version: 1}); err != nil {
		t.Fatal(err)
	}
	follower, reg := newStore(t, followerC, kubestore.Options{ReadOnly: true})
	if follower.Writable() {
		t.Fatal("ReadOnly store is writable")
	}
	if err := follower.Save("notify-slack", doc{Version: 2}); err != nil {
		t.Fatalf("follower Save = %v, want nil (skipped)", err)
	}
	if got := configMap(t, leaderC).Data["notify-slack"]; got != `{"version":1,"items":null}` {
		t.Errorf("follower overwrote the leader's document: %s", got)
	}
	if got := value(t, reg, "watchdog_state_configmap_writes_total", "result", "skipped_follower"); got != 1 {
		t.Errorf("skipped writes = %v", got)
	}
	cm := configMap(t, leaderC)
	cm.Data["alerts"] = "{broken"
	if _, err := leaderC.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var v []int
	if err := follower.Load("alerts", &v, time.Now()); !errors.Is(err, kubestore.ErrCorrupt) {
		t.Fatalf("Load = %v", err)
	}
	if configMap(t, leaderC).Data["alerts"] != "{broken" {
		t.Error("a follower moved the value aside")
	}
	// Elected: it writes.
	follower.SetWritable(true)
	if err := follower.Save("notify-slack", doc{Version: 3}); err != nil {
		t.Fatal(err)
	}
	if got := configMap(t, leaderC).Data["notify-slack"]; got != `{"version":3,"items":null}` {
		t.Errorf("after SetWritable(true): %s", got)
	}
}

// Writes carry the resourceVersion read; when someone else wrote in
// between, the store re-reads and re-applies only its own document.
func TestConflictRereadsAndKeepsOtherDocuments(t *testing.T) {
	api := kubetest.NewAPI()
	a, reg := newStore(t, api.Client("a"), kubestore.Options{})
	b, _ := newStore(t, api.Client("b"), kubestore.Options{})
	if err := a.Save("notify-slack", doc{Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Save("notify-pagerduty", doc{Version: 1}); err != nil { // a's cached version is now stale
		t.Fatal(err)
	}
	if err := a.Save("alerts", []int{5}); err != nil {
		t.Fatal(err)
	}
	data := configMap(t, api.Client("check")).Data
	if len(data) != 3 || data["notify-pagerduty"] == "" || data["alerts"] != "[5]" {
		t.Errorf("data = %v, want all three documents", data)
	}
	if got := value(t, reg, "watchdog_state_configmap_conflicts_total"); got != 1 {
		t.Errorf("conflicts = %v, want 1", got)
	}
}

// Re-elected, a copy must not trust what it cached while it led before:
// another leader may have written since.
func TestSetWritableForgetsTheCache(t *testing.T) {
	api := kubetest.NewAPI()
	a, _ := newStore(t, api.Client("a"), kubestore.Options{})
	b, _ := newStore(t, api.Client("b"), kubestore.Options{})
	if err := a.Save("alerts", []int{1}); err != nil {
		t.Fatal(err)
	}
	a.SetWritable(false)
	if err := b.Save("alerts", []int{2}); err != nil {
		t.Fatal(err)
	}
	a.SetWritable(true)
	if err := a.Save("alerts", []int{1}); err != nil {
		t.Fatal(err)
	}
	if got := configMap(t, api.Client("check")).Data["alerts"]; got != "[1]" {
		t.Errorf("alerts = %s, want [1]: the write was skipped against a stale cache", got)
	}
}

func TestTooLargeIsRefusedWithSizes(t *testing.T) {
	api := kubetest.NewAPI()
	c := api.Client("a")
	s, reg := newStore(t, c, kubestore.Options{MaxBytes: 400})
	if err := s.Save("alerts", []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	big := doc{Version: 1, Items: []string{strings.Repeat("x", 500)}}
	err := s.Save("notify-slack", big)
	if !errors.Is(err, kubestore.ErrTooLarge) {
		t.Fatalf("Save = %v, want ErrTooLarge", err)
	}
	for _, want := range []string{"notify-slack", "526 bytes", "limit of 400", "alerts=7", "notify.max_pending", "notify.max_records"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if got := value(t, reg, "watchdog_state_configmap_writes_total", "result", "too_large"); got != 1 {
		t.Errorf("too_large = %v", got)
	}
	if _, written := configMap(t, c).Data["notify-slack"]; written {
		t.Error("an oversized document was written")
	}
	// The previous version of a document is kept.
	if err := s.Save("notify-slack", doc{Version: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save("notify-slack", big); !errors.Is(err, kubestore.ErrTooLarge) {
		t.Fatal(err)
	}
	if got := configMap(t, c).Data["notify-slack"]; got != `{"version":1,"items":null}` {
		t.Errorf("previous version lost: %s", got)
	}
}

// Moved-aside corrupt copies are dropped, oldest first, before live state
// is refused.
func TestCompactionDropsCorruptCopiesFirst(t *testing.T) {
	api := kubetest.NewAPI()
	c := api.Client("a")
	s, _ := newStore(t, c, kubestore.Options{MaxBytes: 700})
	if err := s.Save("alerts", []int{1}); err != nil {
		t.Fatal(err)
	}
	cm := configMap(t, c)
	cm.Data["notify-slack.corrupt-100"] = strings.Repeat("a", 200)
	cm.Data["notify-slack.corrupt-200"] = strings.Repeat("b", 200)
	if _, err := c.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Save("notify-slack", doc{Version: 1, Items: []string{strings.Repeat("x", 300)}}); err != nil {
		t.Fatalf("Save = %v, want room made by dropping a corrupt copy", err)
	}
	data := configMap(t, c).Data
	if _, ok := data["notify-slack.corrupt-100"]; ok {
		t.Error("oldest corrupt copy kept")
	}
	if _, ok := data["notify-slack.corrupt-200"]; !ok {
		t.Error("newer corrupt copy dropped although there was room")
	}
}

func TestTransientErrorsAreRetriedRefusalsAreNot(t *testing.T) {
	api := kubetest.NewAPI()
	c := api.Client("a")
	s, _ := newStore(t, c, kubestore.Options{Timeout: 5 * time.Second})
	var mu sync.Mutex
	fails := 2
	api.FailWith("a", func(verb, resource string) error {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return apierrors.NewServiceUnavailable("etcd leader changed")
		}
		return nil
	})
	if err := s.Save("alerts", []int{1}); err != nil {
		t.Fatalf("Save after two 503s = %v", err)
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, kubestore.DefaultName,
		errors.New(`User "system:serviceaccount:watchdog:default" cannot update resource "configmaps"`))
	calls := 0
	api.FailWith("a", func(verb, resource string) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return forbidden
	})
	start := time.Now()
	err := s.Save("alerts", []int{2})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "writing ConfigMap watchdog/sglang-watchdog-state") {
		t.Fatalf("Save = %v, want the forbidden error, naming the ConfigMap", err)
	}
	if calls != 1 || time.Since(start) > time.Second {
		t.Errorf("a refusal was retried: %d calls in %s", calls, time.Since(start))
	}
	api.FailWith("a", func(string, string) error { return fmt.Errorf("dial tcp 10.96.0.1:443: connect: connection refused") })
	short, _ := newStore(t, c, kubestore.Options{Timeout: 300 * time.Millisecond})
	start = time.Now()
	if err := short.Load("alerts", new([]int), time.Now()); err == nil || errors.Is(err, kubestore.ErrCorrupt) {
		t.Fatalf("Load with the API down = %v, want a plain error", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Load took %s, Timeout is 300ms", d)
	}
}

func TestConcurrentSavesAllLand(t *testing.T) {
	api := kubetest.NewAPI()
	s, _ := newStore(t, api.Client("a"), kubestore.Options{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 5 {
				if err := s.Save(fmt.Sprintf("doc-%d", i), []int{j}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	data := configMap(t, api.Client("check")).Data
	for i := range 8 {
		if got := data[fmt.Sprintf("doc-%d", i)]; got != "[4]" {
			t.Errorf("doc-%d = %q", i, got)
		}
	}
}

func TestNewRejectsBadNames(t *testing.T) {
	c := kubetest.NewAPI().Client("a")
	for _, o := range []kubestore.Options{
		{Namespace: ns, Name: "Bad_Name"},
		{Namespace: ""},
		{Namespace: "UPPER"},
	} {
		if _, err := kubestore.New(c, o, nil); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	s, _ := newStore(t, c, kubestore.Options{})
	if err := s.Save("../etc", 1); err == nil {
		t.Error("invalid document name accepted")
	}
	var js json.RawMessage
	if err := s.Load("Upper", &js, time.Now()); err == nil {
		t.Error("invalid document name accepted by Load")
	}
}

// Losing the lease aborts a write that is retrying against an unreachable
// API server at once: the queues save under their lock, and a leader that
// can no longer write must not keep delivering until the write times out.
func TestSetWritableFalseAbortsAWriteUnderWay(t *testing.T) {
	api := kubetest.NewAPI()
	c := api.Client("a")
	s, reg := newStore(t, c, kubestore.Options{Timeout: time.Minute})
	retrying := make(chan struct{}, 1)
	api.FailWith("a", func(string, string) error {
		select {
		case retrying <- struct{}{}:
		default:
		}
		return apierrors.NewServiceUnavailable("apiserver unreachable")
	})
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Save("alerts", []int{1}) }()
	<-retrying
	s.SetWritable(false)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Save = %v, want nil (abandoned: no longer the leader)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Save kept retrying after SetWritable(false)")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Save returned after %s", d)
	}
	if got := value(t, reg, "watchdog_state_configmap_writes_total", "result", "skipped_follower"); got != 1 {
		t.Errorf("skipped = %v", got)
	}
}

// Large documents (the incident records of a busy fleet) are stored
// gzip-compressed in binaryData under the same key; small ones stay JSON
// in data; a key is never in both.
func TestLargeDocumentsAreCompressed(t *testing.T) {
	api := kubetest.NewAPI()
	c := api.Client("a")
	s, _ := newStore(t, c, kubestore.Options{CompressAbove: 4096})
	type record struct {
		Open bool              `json:"open"`
		Last notify.Event      `json:"last"`
		Ref  map[string]string `json:"ref"`
	}
	incidents := map[string]record{}
	for i := range 200 {
		ev := notifytest.Samples()[i%3]
		ev.Fingerprint = fmt.Sprintf("%016x", i*7919)
		ev.Replica = fmt.Sprintf("replica-%d", i)
		ev.Evidence = append([]notify.Field(nil), ev.Evidence...)
		ev.Evidence[0].Value = float64(i) * 1.37
		incidents[ev.Fingerprint] = record{Open: i%2 == 0, Last: ev, Ref: map[string]string{"ts": fmt.Sprintf("1773480400.%06d", i)}}
	}
	js, _ := json.Marshal(incidents)
	if err := s.Save("notify-slack", incidents); err != nil {
		t.Fatal(err)
	}
	cm := configMap(t, c)
	if _, plain := cm.Data["notify-slack"]; plain {
		t.Fatal("large document stored uncompressed")
	}
	gz := cm.BinaryData["notify-slack"]
	ratio := float64(len(js)) / float64(len(gz))
	t.Logf("200 incident records: %d bytes of JSON, %d compressed (%.1fx)", len(js), len(gz), ratio)
	if ratio < 5 {
		t.Errorf("compression ratio %.1f, want at least 5", ratio)
	}
	var back map[string]record
	if err := s.Load("notify-slack", &back, time.Now()); err != nil || len(back) != 200 {
		t.Fatalf("Load: %v, %d records", err, len(back))
	}
	// Unchanged: not rewritten. Shrunk: back to plain JSON, binary key gone.
	rv := cm.ResourceVersion
	if err := s.Save("notify-slack", incidents); err != nil {
		t.Fatal(err)
	}
	if configMap(t, c).ResourceVersion != rv {
		t.Error("an unchanged compressed document was rewritten")
	}
	if err := s.Save("notify-slack", doc{Version: 1}); err != nil {
		t.Fatal(err)
	}
	cm = configMap(t, c)
	if _, still := cm.BinaryData["notify-slack"]; still || cm.Data["notify-slack"] == "" {
		t.Errorf("data %v, binaryData keys %d", cm.Data, len(cm.BinaryData))
	}
	// A corrupt compressed value is moved aside like a plain one.
	cm.Data = map[string]string{}
	cm.BinaryData = map[string][]byte{"notify-slack": []byte("\x1f\x8bnot really gzip")}
	if _, err := c.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Load("notify-slack", &back, time.Unix(1773480400, 0)); !errors.Is(err, kubestore.ErrCorrupt) {
		t.Fatalf("Load = %v, want ErrCorrupt", err)
	}
	if _, ok := configMap(t, c).BinaryData["notify-slack.corrupt-1773480400"]; !ok {
		t.Error("corrupt compressed value not moved aside")
	}
}
