// Package kubetest is a fake Kubernetes API for tests of leader election and
// the ConfigMap store: several clients (one per simulated daemon) share one
// object store, and updates honour resourceVersion the way the API server
// does.
//
// The client-go fake clientset alone is not enough for that: its object
// tracker never sets metadata.resourceVersion and applies every update
// unconditionally, so two LeaseLocks that both read an expired lease would
// both "acquire" it, and each leader's fast-path renewal would keep
// succeeding over the other's. API.Client prepends a reactor that keeps a
// resourceVersion per object and answers a stale update with 409 Conflict.
package kubetest

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// ErrPartitioned is returned for every request of a partitioned client.
var ErrPartitioned = errors.New("kubetest: client partitioned from the API server")

// API is one fake API server.
type API struct {
	mu      sync.Mutex // makes check-and-update atomic across clients
	tracker k8stesting.ObjectTracker
	rv      int64
	clients map[string]*clientState
	changed chan struct{} // closed and replaced on every write
}

type clientState struct {
	partitioned bool
	// fail, when set, is asked before each request: a non-nil error is
	// returned instead of serving it.
	fail func(verb, resource string) error
}

// NewAPI returns an empty fake API server.
func NewAPI() *API {
	base := fake.NewSimpleClientset()
	return &API{tracker: base.Tracker(), clients: map[string]*clientState{}, changed: make(chan struct{})}
}

// Await waits until cond holds, re-checking it after every write to the
// API, for at most timeout, and reports whether it held. cond may use any
// client of the API.
func (a *API) Await(timeout time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		a.mu.Lock()
		ch := a.changed
		a.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return cond()
		}
	}
}

// wrote wakes Await. Callers hold a.mu.
func (a *API) wrote() {
	close(a.changed)
	a.changed = make(chan struct{})
}

// Client returns a clientset named name talking to the shared API. The name
// is only used by Partition and FailWith.
func (a *API) Client(name string) *fake.Clientset {
	a.mu.Lock()
	st := &clientState{}
	a.clients[name] = st
	a.mu.Unlock()
	cs := fake.NewSimpleClientset()
	cs.PrependReactor("*", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		return a.react(st, action)
	})
	return cs
}

// Partition cuts (or restores) one client's access: every request fails
// with ErrPartitioned, as for a frozen or killed process that can no longer
// renew or release its lease.
func (a *API) Partition(name string, cut bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clients[name].partitioned = cut
}

// FailWith installs f: it is asked before each request of client name and
// a non-nil result is returned instead of serving it. nil removes it.
func (a *API) FailWith(name string, f func(verb, resource string) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clients[name].fail = f
}

func (a *API) react(st *clientState, action k8stesting.Action) (bool, runtime.Object, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st.partitioned {
		return true, nil, ErrPartitioned
	}
	if st.fail != nil {
		if err := st.fail(action.GetVerb(), action.GetResource().Resource); err != nil {
			return true, nil, err
		}
	}
	gvr := action.GetResource()
	ns := action.GetNamespace()
	switch act := action.(type) {
	case k8stesting.GetActionImpl:
		obj, err := a.tracker.Get(gvr, ns, act.GetName())
		return true, obj, err
	case k8stesting.CreateActionImpl:
		obj := act.GetObject().DeepCopyObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		if m.GetResourceVersion() != "" {
			return true, nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
		}
		a.rv++
		m.SetResourceVersion(strconv.FormatInt(a.rv, 10))
		if err := a.tracker.Create(gvr, obj, ns); err != nil {
			a.rv--
			return true, nil, err
		}
		a.wrote()
		return true, obj.DeepCopyObject(), nil
	case k8stesting.UpdateActionImpl:
		obj := act.GetObject().DeepCopyObject()
		m, err := meta.Accessor(obj)
		if err != nil {
			return true, nil, err
		}
		cur, err := a.tracker.Get(gvr, ns, m.GetName())
		if err != nil {
			return true, nil, err
		}
		cm, _ := meta.Accessor(cur)
		if want := m.GetResourceVersion(); want != "" && want != cm.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: gvr.Group, Resource: gvr.Resource}, m.GetName(),
				fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again (have %s, stored %s)", want, cm.GetResourceVersion()))
		}
		a.rv++
		m.SetResourceVersion(strconv.FormatInt(a.rv, 10))
		if err := a.tracker.Update(gvr, obj, ns); err != nil {
			return true, nil, err
		}
		a.wrote()
		return true, obj.DeepCopyObject(), nil
	case k8stesting.DeleteActionImpl:
		if err := a.tracker.Delete(gvr, ns, act.GetName()); err != nil {
			return true, nil, err
		}
		a.wrote()
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("kubetest: %s %s is not supported", action.GetVerb(), gvr.Resource)
}
