package leader_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore/kubetest"
	"github.com/sglang-watchdog/sglang-watchdog/internal/leader"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fast are the timings of every test: real time, since leader election
// measures it. The Lease stores whole seconds and followers see renewals at
// one-second resolution, so lease_duration must exceed renew_deadline by a
// second (MinLeaseMargin): 1s/0.5s would let a follower take over while
// the leader still leads.
var fast = leader.Config{
	Enabled:       true,
	Namespace:     "watchdog",
	LeaseDuration: 2 * time.Second,
	RenewDeadline: 500 * time.Millisecond,
	RetryPeriod:   200 * time.Millisecond,
}

// schedulingAllowance is added to real-time bounds: goroutines of a
// -race test binary on a busy machine can be late by this much.
const schedulingAllowance = 2 * time.Second

type change struct {
	leader bool
	at     time.Time
}

type instance struct {
	e       *leader.Elector
	reg     *prometheus.Registry
	logs    *observer.ObservedLogs
	changes chan change
	cancel  context.CancelFunc
	done    chan struct{}
}

func start(t *testing.T, c kubernetes.Interface, id string) *instance {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	in := &instance{reg: prometheus.NewRegistry(), logs: logs, changes: make(chan change, 32), done: make(chan struct{})}
	e, err := leader.New(fast, c, id, in.reg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	e.OnChange(func(l bool) { in.changes <- change{l, time.Now()} })
	in.e = e
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() {
		if err := e.Run(ctx); err != nil {
			t.Error(err)
		}
		close(in.done)
	}()
	t.Cleanup(in.stop)
	return in
}

func (in *instance) stop() {
	in.cancel()
	<-in.done
}

// next waits for the next leadership change, at most d.
func (in *instance) next(t *testing.T, d time.Duration) change {
	t.Helper()
	select {
	case c := <-in.changes:
		return c
	case <-time.After(d):
		t.Fatalf("%s: no leadership change within %s", in.e.Identity(), d)
		return change{}
	}
}

// quiet asserts that no change arrives within d.
func (in *instance) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case c := <-in.changes:
		t.Fatalf("%s: unexpected change to leader=%v", in.e.Identity(), c.leader)
	case <-time.After(d):
	}
}

func holder(t *testing.T, c kubernetes.Interface) string {
	t.Helper()
	l, err := c.CoordinationV1().Leases("watchdog").Get(context.Background(), leader.DefaultLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func TestSingleCopyLeadsAndReleasesOnShutdown(t *testing.T) {
	api := kubetest.NewAPI()
	a := start(t, api.Client("a"), "watchdog-a")
	if c := a.next(t, 3*time.Second); !c.leader {
		t.Fatal("first change is not leadership")
	}
	if !a.e.IsLeader() || a.e.Leader() != "watchdog-a" {
		t.Errorf("IsLeader %v, Leader %q", a.e.IsLeader(), a.e.Leader())
	}
	if got := holder(t, api.Client("check")); got != "watchdog-a" {
		t.Errorf("Lease holder = %q", got)
	}
	if got := value(t, a.reg, "watchdog_leader"); got != 1 {
		t.Errorf("watchdog_leader = %v", got)
	}
	if a.logs.FilterMessageSnippet("became leader").Len() != 1 {
		t.Error("leadership not logged")
	}
	a.stop()
	if c := a.next(t, time.Second); c.leader {
		t.Fatal("no final change to follower on shutdown")
	}
	if got := holder(t, api.Client("check")); got != "" {
		t.Errorf("Lease not released on shutdown: holder %q", got)
	}
	if a.e.IsLeader() {
		t.Error("IsLeader after shutdown")
	}
	if got := value(t, a.reg, "watchdog_leader"); got != 0 {
		t.Errorf("watchdog_leader = %v after shutdown", got)
	}
	if got := value(t, a.reg, "watchdog_leader_transitions_total"); got != 2 {
		t.Errorf("transitions = %v, want 2", got)
	}
	problems, err := testutil.GatherAndLint(a.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// value reads an unlabelled gauge or counter from reg.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			if m := mf.GetMetric()[0]; m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			} else {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

// Two copies: exactly one leads; stopping it cleanly releases the lease and
// the other takes over without waiting for the lease to expire.
func TestOneLeadsCleanShutdownHandsOver(t *testing.T) {
	api := kubetest.NewAPI()
	a := start(t, api.Client("a"), "watchdog-a")
	a.next(t, 3*time.Second)
	b := start(t, api.Client("b"), "watchdog-b")
	b.quiet(t, fast.LeaseDuration) // renewed all along: b never leads
	if b.e.IsLeader() || b.e.Leader() != "watchdog-a" {
		t.Fatalf("b: IsLeader %v, Leader %q", b.e.IsLeader(), b.e.Leader())
	}
	stopped := time.Now()
	a.stop()
	c := b.next(t, 3*time.Second)
	if !c.leader {
		t.Fatal("b did not take over")
	}
	took := c.at.Sub(stopped)
	t.Logf("takeover after a clean shutdown: %s", took)
	if took >= fast.LeaseDuration {
		t.Errorf("takeover took %s: the released lease should not have to expire (%s)", took, fast.LeaseDuration)
	}
	if got := holder(t, api.Client("check")); got != "watchdog-b" {
		t.Errorf("holder = %q", got)
	}
}

// A copy frozen or cut off from the API server cannot renew or release.
// It stops leading by itself within renew_deadline, and the other copy
// takes over after lease_duration: never both at once.
func TestHardStopTakeoverWithinLeaseDuration(t *testing.T) {
	api := kubetest.NewAPI()
	a := start(t, api.Client("a"), "watchdog-a")
	a.next(t, 3*time.Second)
	b := start(t, api.Client("b"), "watchdog-b")
	b.quiet(t, time.Second)

	cut := time.Now()
	api.Partition("a", true)
	lost := a.next(t, 3*time.Second)
	gained := b.next(t, 5*time.Second)
	if lost.leader || !gained.leader {
		t.Fatalf("a: leader=%v, b: leader=%v", lost.leader, gained.leader)
	}
	t.Logf("after the cut: a stopped leading in %s, b leads in %s", lost.at.Sub(cut), gained.at.Sub(cut))
	if d := lost.at.Sub(cut); d > fast.RenewDeadline+fast.RetryPeriod+schedulingAllowance/4 {
		t.Errorf("a kept leading %s after it could no longer renew (renew_deadline %s)", d, fast.RenewDeadline)
	}
	if !lost.at.Before(gained.at) {
		t.Errorf("two leaders: b led at %s, a stopped at %s", gained.at.Format(time.StampMicro), lost.at.Format(time.StampMicro))
	}
	// lease_duration after b last saw a renewal (at most one poll after the
	// cut), plus the poll that finds it expired: a poll is retry_period
	// with up to 120% jitter. Typically 2.0-2.3s; the bound allows for a
	// loaded CI machine running every package under -race.
	poll := time.Duration(float64(fast.RetryPeriod) * 2.2)
	if d := gained.at.Sub(cut); d > fast.LeaseDuration+2*poll+schedulingAllowance {
		t.Errorf("takeover took %s, want within lease_duration %s + 2 polls (%s) + %s", d, fast.LeaseDuration, 2*poll, schedulingAllowance)
	}
	if a.logs.FilterMessageSnippet("stopped leading").Len() == 0 {
		t.Error("loss not logged")
	}
	// a campaigns again: once healed and b leaves, a leads.
	api.Partition("a", false)
	a.quiet(t, time.Second)
	b.stop()
	b.next(t, time.Second)
	if c := a.next(t, 3*time.Second); !c.leader {
		t.Fatal("a did not campaign again")
	}
}

func TestConfigValidateAndDefaults(t *testing.T) {
	if err := leader.DefaultConfig().Validate("ha"); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if err := (leader.Config{}).Validate("ha"); err != nil {
		t.Fatalf("zero config (all defaults) invalid: %v", err)
	}
	d := leader.Config{}.WithDefaults()
	if d.LeaseName != "sglang-watchdog" || d.StateConfigMap != "sglang-watchdog-state" ||
		d.LeaseDuration != 15*time.Second || d.RenewDeadline != 10*time.Second || d.RetryPeriod != 2*time.Second {
		t.Errorf("WithDefaults = %+v", d)
	}
	for _, tc := range []struct {
		cfg  leader.Config
		want []string
	}{
		{leader.Config{LeaseDuration: -time.Second, RetryPeriod: -1}, []string{"ha.lease_duration: must not be negative", "ha.retry_period: must not be negative"}},
		{leader.Config{LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}, []string{"ha.lease_duration: must be whole seconds"}},
		{leader.Config{LeaseDuration: 10 * time.Second}, []string{"ha.renew_deadline: 10s must be at least 1s below lease_duration 10s"}},
		{leader.Config{LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}, []string{"ha.renew_deadline: 500ms must be at least 1s below"}},
		{leader.Config{RenewDeadline: 2 * time.Second}, []string{"ha.retry_period: 2s is too long"}},
		{leader.Config{LeaseName: "Watchdog_Lease", StateConfigMap: "a/b", Namespace: "Prod", Identity: " pod "},
			[]string{"ha.lease_name", "ha.state_configmap", "ha.namespace", "ha.identity"}},
	} {
		err := tc.cfg.Validate("ha")
		if err == nil {
			t.Errorf("%+v: accepted", tc.cfg)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", tc.cfg, err, w)
			}
		}
	}
}

func TestNewRejects(t *testing.T) {
	c := kubetest.NewAPI().Client("a")
	if _, err := leader.New(fast, c, "", nil, nil); err == nil {
		t.Error("empty identity accepted")
	}
	if _, err := leader.New(fast, nil, "a", nil, nil); err == nil {
		t.Error("nil client accepted")
	}
	bad := fast
	bad.RenewDeadline = 2 * time.Second
	if _, err := leader.New(bad, c, "a", nil, nil); err == nil || !strings.Contains(err.Error(), "ha.renew_deadline") {
		t.Errorf("invalid config: %v", err)
	}
	withID := fast
	withID.Identity = "from-config"
	e, err := leader.New(withID, c, "", nil, nil)
	if err != nil || e.Identity() != "from-config" {
		t.Errorf("identity from config: %v, %v", e, err)
	}
}

func TestOwnNamespaceAndIdentity(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	noFile := func(string) ([]byte, error) { return nil, os.ErrNotExist }
	saFile := func(p string) ([]byte, error) {
		if p != leader.ServiceAccountNamespaceFile {
			return nil, os.ErrNotExist
		}
		return []byte("llm-serving\n"), nil
	}
	if got := leader.OwnNamespace(env(map[string]string{"POD_NAMESPACE": "from-env"}), saFile); got != "from-env" {
		t.Errorf("POD_NAMESPACE: %q", got)
	}
	if got := leader.OwnNamespace(env(nil), saFile); got != "llm-serving" {
		t.Errorf("service account file: %q", got)
	}
	if got := leader.OwnNamespace(env(nil), noFile); got != "default" {
		t.Errorf("fallback: %q", got)
	}
	host := func() (string, error) { return "node-host", nil }
	if got, _ := leader.DefaultIdentity(env(map[string]string{"HOSTNAME": "watchdog-7d9f-x2k4"}), host); got != "watchdog-7d9f-x2k4" {
		t.Errorf("HOSTNAME: %q", got)
	}
	if got, _ := leader.DefaultIdentity(env(nil), host); got != "node-host" {
		t.Errorf("os.Hostname: %q", got)
	}
	if _, err := leader.DefaultIdentity(env(nil), func() (string, error) { return "", errors.New("no uts") }); err == nil {
		t.Error("hostname error swallowed")
	}
}

// client-go's leader-election log goes to zap: its chatter at debug, its
// errors as warnings once per distinct message in a row (it retries every
// retry period), verbose levels dropped.
func TestClientGoLogRoutedToZap(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	l := leader.Logr(zap.New(core))
	forbidden := errors.New(`leases.coordination.k8s.io "sglang-watchdog" is forbidden`)
	l.Info("Attempting to acquire leader lease...", "lock", "watchdog/sglang-watchdog")
	l.V(4).Info("Lease is held by and has not yet expired")
	l.Error(forbidden, "Error retrieving lease lock", "lock", "watchdog/sglang-watchdog")
	l.Error(forbidden, "Error retrieving lease lock", "lock", "watchdog/sglang-watchdog")
	l.WithValues("k", "v").Error(errors.New("conflict"), "Failed to update lease")
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Level.String()+" "+e.Message)
	}
	want := []string{
		"debug Attempting to acquire leader lease...",
		"warn Error retrieving lease lock",
		"debug Error retrieving lease lock",
		"warn Failed to update lease",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := logs.All()[1]; e.ContextMap()["lock"] != "watchdog/sglang-watchdog" || e.ContextMap()["error"] == nil {
		t.Errorf("fields lost: %v", e.ContextMap())
	}
}
