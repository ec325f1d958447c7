package discovery

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/client-go/kubernetes"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// testOptions are the production timings; tests run inside synctest
// bubbles, where waiting costs no real time.
var testOptions = options{
	saNamespaceFile: "testdata/serviceaccount/namespace",
	minInterval:     DefaultMinUpdateInterval,
	syncTimeout:     DefaultInitialSyncTimeout,
}

// harness runs a Discoverer and records its updates.
type harness struct {
	d       *Discoverer
	reg     *prometheus.Registry
	logs    *observer.ObservedLogs
	updates chan update
	stop    func()
}

type update struct {
	at      time.Time
	targets []scrape.Target
}

func newHarness(t *testing.T, cfg Config, static []scrape.Target, kube kubernetes.Interface, r Resolver) *harness {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	d, err := newDiscoverer(cfg, static, kube, r, reg, zap.New(core), testOptions)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{d: d, reg: reg, logs: logs}
}

// start runs the Discoverer until stop (or the end of the test).
func (h *harness) start(t *testing.T) {
	t.Helper()
	h.updates = make(chan update, 1000)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- h.d.Run(ctx, func(ts []scrape.Target) { h.updates <- update{time.Now(), ts} })
	}()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		if h.stop != nil {
			h.stop()
			h.stop = nil
		}
	})
}

// next waits for the next update; within a bubble a missing update fails
// after a minute of fake time instead of hanging.
func (h *harness) next(t *testing.T) update {
	t.Helper()
	select {
	case u := <-h.updates:
		return u
	case <-time.After(time.Minute):
		t.Fatal("no update within a minute")
		return update{}
	}
}

// none asserts no update comes within d.
func (h *harness) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case u := <-h.updates:
		t.Fatalf("unexpected update: %v", names(u.targets))
	case <-time.After(d):
	}
}

func names(ts []scrape.Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func wantNames(t *testing.T, ts []scrape.Target, want ...string) {
	t.Helper()
	if got := names(ts); !slices.Equal(got, want) {
		t.Fatalf("targets %q, want %q", got, want)
	}
}

func find(t *testing.T, ts []scrape.Target, name string) scrape.Target {
	t.Helper()
	for _, tg := range ts {
		if tg.Name == name {
			return tg
		}
	}
	t.Fatalf("no target %s in %q", name, names(ts))
	return scrape.Target{}
}

// fakeResolver answers from maps that tests change between refreshes.
type fakeResolver struct {
	mu    sync.Mutex
	hosts map[string][]string
	srv   map[string][]*net.SRV
	errs  map[string]error
	calls int
}

func newFakeResolver() *fakeResolver {
	return &fakeResolver{hosts: map[string][]string{}, srv: map[string][]*net.SRV{}, errs: map[string]error{}}
}

func (r *fakeResolver) set(fn func(r *fakeResolver)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r)
}

func (r *fakeResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if err := r.errs[host]; err != nil {
		return nil, err
	}
	ips, ok := r.hosts[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]net.IPAddr, len(ips))
	for i, ip := range ips {
		out[i] = net.IPAddr{IP: net.ParseIP(ip)}
	}
	return out, nil
}

func (r *fakeResolver) LookupSRV(_ context.Context, service, proto, name string) (string, []*net.SRV, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if service != "" || proto != "" {
		return "", nil, errors.New("fake resolver: want the full SRV name")
	}
	if err := r.errs[name]; err != nil {
		return "", nil, err
	}
	recs, ok := r.srv[name]
	if !ok {
		return "", nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
	}
	return name, slices.Clone(recs), nil
}
