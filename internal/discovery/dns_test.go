package discovery

import (
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestDNSARecordsFollowTheService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeResolver()
		r.hosts["sglang.llm.svc"] = []string{"10.0.0.2", "10.0.0.1"}
		cfg := Config{DNS: []DNSConfig{{Names: []string{"sglang.llm.svc"}, Labels: map[string]string{"model": "llama-3-70b"}}}}
		h := newHarness(t, cfg, nil, nil, r)
		start := time.Now()
		h.start(t)

		u := h.next(t)
		if u.at != start {
			t.Errorf("first update after %v, want at once", u.at.Sub(start))
		}
		wantNames(t, u.targets, "10.0.0.1:30000", "10.0.0.2:30000")
		tg := find(t, u.targets, "10.0.0.1:30000")
		if tg.URL != "http://10.0.0.1:30000/metrics" || tg.Kind != "engine" || tg.Labels["model"] != "llama-3-70b" {
			t.Errorf("target %+v", tg)
		}

		// A pod replaced: new IP in, old one out, at the next refresh.
		r.set(func(r *fakeResolver) { r.hosts["sglang.llm.svc"] = []string{"10.0.0.2", "fd00::3"} })
		u2 := h.next(t)
		if got := u2.at.Sub(start); got < DefaultRefreshInterval || got > DefaultRefreshInterval+DefaultMinUpdateInterval {
			t.Errorf("change published after %v, want within a refresh interval and the update delay", got)
		}
		wantNames(t, u2.targets, "10.0.0.2:30000", "[fd00::3]:30000")
		if got := find(t, u2.targets, "[fd00::3]:30000").URL; got != "http://[fd00::3]:30000/metrics" {
			t.Errorf("IPv6 URL %s", got)
		}
		if gone := Removed(u.targets, u2.targets); len(gone) != 1 || gone[0] != "10.0.0.1:30000" {
			t.Errorf("Removed = %q", gone)
		}

		// Same answer in another order: no update.
		r.set(func(r *fakeResolver) { r.hosts["sglang.llm.svc"] = []string{"fd00::3", "10.0.0.2"} })
		h.none(t, 3*DefaultRefreshInterval)
		if got := testutil.ToFloat64(h.d.metrics.targets.WithLabelValues(SourceDNS)); got != 2 {
			t.Errorf("watchdog_discovery_targets{source=dns} = %v", got)
		}
	})
}

func TestDNSSRVTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeResolver()
		const name = "_http._tcp.sglang.llm.svc.cluster.local"
		r.srv[name] = []*net.SRV{
			{Target: "sglang-1.sglang.llm.svc.cluster.local.", Port: 30000},
			{Target: "sglang-0.sglang.llm.svc.cluster.local.", Port: 30000},
		}
		cfg := Config{DNS: []DNSConfig{{Names: []string{name}, NamePrefix: "llama-", Port: 1234, Path: "/engine_metrics", Kind: "gateway"}}}
		h := newHarness(t, cfg, nil, nil, r)
		h.start(t)

		u := h.next(t)
		wantNames(t, u.targets, "llama-sglang-0:30000", "llama-sglang-1:30000")
		tg := find(t, u.targets, "llama-sglang-0:30000")
		// The record's host and port win; the name stays resolvable by the
		// scraper's HTTP client.
		if tg.URL != "http://sglang-0.sglang.llm.svc.cluster.local:30000/engine_metrics" || tg.Kind != "gateway" {
			t.Errorf("target %+v", tg)
		}

		r.set(func(r *fakeResolver) {
			r.srv[name] = append(r.srv[name], &net.SRV{Target: "sglang-2.sglang.llm.svc.cluster.local.", Port: 30001})
		})
		wantNames(t, h.next(t).targets, "llama-sglang-0:30000", "llama-sglang-1:30000", "llama-sglang-2:30001")
	})
}

// A resolver failure never drops the fleet: the last known targets stay
// until an answer says otherwise. Failures are counted each time and
// logged once per distinct error.
func TestDNSFailureKeepsTheLastTargets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeResolver()
		r.hosts["sglang.llm.svc"] = []string{"10.0.0.1", "10.0.0.2"}
		h := newHarness(t, Config{DNS: []DNSConfig{{Names: []string{"sglang.llm.svc"}}}}, nil, nil, r)
		h.start(t)
		wantNames(t, h.next(t).targets, "10.0.0.1:30000", "10.0.0.2:30000")

		timeout := &net.DNSError{Err: "i/o timeout", Name: "sglang.llm.svc", IsTimeout: true}
		r.set(func(r *fakeResolver) { r.errs["sglang.llm.svc"] = timeout })
		h.none(t, 4*DefaultRefreshInterval+time.Second) // four failed refreshes
		// Every pod unready: a headless Service answers NXDOMAIN. Still an
		// error, still no update: the outage keeps its evidence.
		r.set(func(r *fakeResolver) { delete(r.errs, "sglang.llm.svc"); delete(r.hosts, "sglang.llm.svc") })
		h.none(t, 2*DefaultRefreshInterval)

		if got := testutil.ToFloat64(h.d.metrics.failures.WithLabelValues(SourceDNS)); got != 6 {
			t.Errorf("refresh failures = %v, want 6", got)
		}
		if n := h.logs.FilterMessage("DNS lookup failed; keeping the last known targets").Len(); n != 2 {
			t.Errorf("%d failure logs, want 2 (one per distinct error)", n)
		}

		r.set(func(r *fakeResolver) { r.hosts["sglang.llm.svc"] = []string{"10.0.0.2", "10.0.0.3"} })
		wantNames(t, h.next(t).targets, "10.0.0.2:30000", "10.0.0.3:30000")
		if n := h.logs.FilterMessage("DNS lookup recovered").Len(); n != 1 {
			t.Errorf("%d recovery logs, want 1", n)
		}
	})
}

// A name that fails its very first lookup has nothing to keep: the first
// update goes out without it, and it joins when it resolves.
func TestDNSInitialFailureDoesNotHoldTheFirstUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeResolver()
		r.hosts["a.svc"] = []string{"10.0.0.1"}
		r.errs["b.svc"] = &net.DNSError{Err: "server misbehaving", Name: "b.svc", IsTemporary: true}
		h := newHarness(t, Config{DNS: []DNSConfig{{Names: []string{"a.svc", "b.svc"}, Port: 8000}}}, nil, nil, r)
		start := time.Now()
		h.start(t)
		u := h.next(t)
		if u.at != start {
			t.Errorf("first update after %v", u.at.Sub(start))
		}
		wantNames(t, u.targets, "10.0.0.1:8000")

		r.set(func(r *fakeResolver) { delete(r.errs, "b.svc"); r.hosts["b.svc"] = []string{"10.0.1.1"} })
		wantNames(t, h.next(t).targets, "10.0.0.1:8000", "10.0.1.1:8000")
	})
}
