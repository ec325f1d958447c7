package kubetest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/sglang-watchdog/sglang-watchdog/internal/kubestore/kubetest"
)

func lock(c kubernetes.Interface, id string) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: "sglang-watchdog", Namespace: "watchdog"},
		Client:     c.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
}

func record(id string) resourcelock.LeaderElectionRecord {
	now := metav1.NewTime(time.Now())
	return resourcelock.LeaderElectionRecord{HolderIdentity: id, LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}
}

// staleRenewal: a and b read the Lease; b takes it over; a, still holding
// the version it read (a paused leader's fast-path renewal), writes.
func staleRenewal(t *testing.T, ca, cb kubernetes.Interface) error {
	t.Helper()
	ctx := context.Background()
	a, b := lock(ca, "a"), lock(cb, "b")
	if err := a.Create(ctx, record("a")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, record("b")); err != nil {
		t.Fatal(err)
	}
	return a.Update(ctx, record("a"))
}

// The reason for this package: the plain fake clientset applies a stale
// update, so a paused leader's renewal would silently overwrite its
// successor and both would lead; the API server, and kubetest, refuse it.
func TestStaleUpdateConflicts(t *testing.T) {
	plain := fake.NewSimpleClientset()
	if err := staleRenewal(t, plain, plain); err != nil {
		t.Fatalf("plain fake refused the stale update (%v): kubetest's reactor may no longer be needed", err)
	}
	api := kubetest.NewAPI()
	err := staleRenewal(t, api.Client("a"), api.Client("b"))
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale update = %v, want 409 Conflict", err)
	}
	l, err := api.Client("check").CoordinationV1().Leases("watchdog").Get(context.Background(), "sglang-watchdog", metav1.GetOptions{})
	if err != nil || *l.Spec.HolderIdentity != "b" || l.ResourceVersion == "" {
		t.Errorf("lease = %+v, %v; want b's, with a resourceVersion", l, err)
	}
}

func TestPartitionAndAwait(t *testing.T) {
	api := kubetest.NewAPI()
	a, b := api.Client("a"), api.Client("b")
	api.Partition("a", true)
	if err := lock(a, "a").Create(context.Background(), record("a")); !errors.Is(err, kubetest.ErrPartitioned) {
		t.Fatalf("partitioned create = %v", err)
	}
	api.Partition("a", false)
	go func() { _ = lock(b, "b").Create(context.Background(), record("b")) }()
	if !api.Await(5*time.Second, func() bool {
		rec, _, err := lock(a, "x").Get(context.Background())
		return err == nil && rec.HolderIdentity == "b"
	}) {
		t.Fatal("b's lease never appeared to a")
	}
}
