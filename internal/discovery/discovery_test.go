package discovery

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// Static, Kubernetes and DNS targets are merged into one sorted list; a
// name two sources share is kept once, from the static list first, and
// the clash is logged once.
func TestMergeStaticWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newFakeResolver()
		r.hosts["sglang.llm.svc"] = []string{"10.0.0.1", "10.0.0.2"}
		cs := fake.NewClientset(newPod("llm", "sglang-a", "10.1.0.1", true, sglangLabels("m", "decode")))
		// WATCHDOG_TARGETS=http://10.0.0.1:30000 names its target host:port,
		// the name DNS gives the same replica.
		static := []scrape.Target{
			{Name: "10.0.0.1:30000", URL: "http://10.0.0.1:30000/metrics", Kind: scrape.KindEngine, Labels: map[string]string{"role": "canary"}},
			{Name: "router", URL: "http://router:29000/metrics", Kind: scrape.KindGateway},
		}
		cfg := kubeConfig(nil)
		cfg.DNS = []DNSConfig{{Names: []string{"sglang.llm.svc"}}}
		h := newHarness(t, cfg, static, cs, r)
		h.start(t)

		u := h.next(t)
		wantNames(t, u.targets, "10.0.0.1:30000", "10.0.0.2:30000", "llm.sglang-a", "router")
		if got := find(t, u.targets, "10.0.0.1:30000").Labels["role"]; got != "canary" {
			t.Errorf("the static target lost to DNS: labels %v", find(t, u.targets, "10.0.0.1:30000").Labels)
		}
		for source, want := range map[string]float64{SourceStatic: 2, SourceDNS: 2, SourceKubernetes: 1} {
			if got := testutil.ToFloat64(h.d.metrics.targets.WithLabelValues(source)); got != want {
				t.Errorf("watchdog_discovery_targets{source=%q} = %v, want %v", source, got, want)
			}
		}
		if got := testutil.ToFloat64(h.d.metrics.selected); got != 4 {
			t.Errorf("watchdog_discovery_selected_targets = %v, want 4", got)
		}

		create(t, cs, newPod("llm", "sglang-b", "10.1.0.2", true, sglangLabels("m", "decode")))
		wantNames(t, h.next(t).targets, "10.0.0.1:30000", "10.0.0.2:30000", "llm.sglang-a", "llm.sglang-b", "router")
		if n := h.logs.FilterMessage("two sources yield the same target name; keeping the first (static, then kubernetes, then file_sd, then dns)").Len(); n != 1 {
			t.Errorf("%d duplicate-name logs, want 1", n)
		}
	})
}

// The shard applies to every source, static included, and what it keeps
// is exactly Shard over the merged list.
func TestRunAppliesTheShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var static []scrape.Target
		for _, tg := range fleet(40) {
			if tg.Labels[LabelModel] != "llama-3-70b" {
				static = append(static, tg)
			}
		}
		cs := fake.NewClientset()
		for i, tg := range fleet(40) {
			if tg.Labels[LabelModel] == "llama-3-70b" {
				name := strings.TrimPrefix(tg.Name, "llm.")
				create(t, cs, newPod("llm", name, fmt.Sprintf("10.1.0.%d", i+1), true, sglangLabels("llama-3-70b", "decode")))
			}
		}
		for index := range 3 {
			cfg := kubeConfig(nil)
			cfg.Shard = ShardConfig{Total: 3, Index: index, By: ShardByModel}
			h := newHarness(t, cfg, static, cs, nil)
			h.start(t)
			got := h.next(t).targets
			h.stop()
			h.stop = nil

			all := slices.Clone(static)
			pt, _ := h.d.kube.targets()
			all = append(all, pt...)
			want := Shard(all, cfg.Shard)
			slices.SortFunc(want, func(a, b scrape.Target) int { return strings.Compare(a.Name, b.Name) })
			if !slices.EqualFunc(got, want, scrape.Target.Equal) {
				t.Errorf("shard %d: got %q, want %q", index, names(got), names(want))
			}
			// The llama pods share a shard: all of them or none here.
			n := 0
			for _, tg := range got {
				if tg.Labels[LabelModel] == "llama-3-70b" {
					n++
				}
			}
			if n != 0 && n != len(pt) {
				t.Errorf("shard %d keeps %d of %d llama pods", index, n, len(pt))
			}
		}
	})
}

func TestRemoved(t *testing.T) {
	ts := func(names ...string) []scrape.Target {
		out := make([]scrape.Target, len(names))
		for i, n := range names {
			out[i] = scrape.Target{Name: n}
		}
		return out
	}
	for _, tc := range []struct {
		prev, next []scrape.Target
		want       []string
	}{
		{nil, ts("a"), nil},
		{ts("a", "b"), nil, []string{"a", "b"}},
		{ts("c", "a", "b"), ts("b"), []string{"a", "c"}},
		{ts("a", "b"), ts("b", "a", "c"), nil},
		// A changed URL is an update, not a removal: the replica keeps its
		// alerts.
		{[]scrape.Target{{Name: "a", URL: "http://10.0.0.1:30000/metrics"}}, []scrape.Target{{Name: "a", URL: "http://10.0.0.9:30000/metrics"}}, nil},
	} {
		if got := Removed(tc.prev, tc.next); !slices.Equal(got, tc.want) {
			t.Errorf("Removed(%q, %q) = %q, want %q", names(tc.prev), names(tc.next), got, tc.want)
		}
	}
}

// Static targets alone: one update at once, then nothing.
func TestStaticOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		static := []scrape.Target{{Name: "localhost:30000", URL: "http://localhost:30000/metrics", Kind: scrape.KindEngine}}
		h := newHarness(t, Config{}, static, nil, nil)
		h.start(t)
		wantNames(t, h.next(t).targets, "localhost:30000")
		h.none(t, DefaultInitialSyncTimeout)
	})
}

func TestNewAndRunErrors(t *testing.T) {
	if _, err := New(Config{Kubernetes: &KubernetesConfig{}}, nil, nil, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "discovery.kubernetes") {
		t.Errorf("kubernetes without a client: %v", err)
	}
	if _, err := New(Config{Shard: ShardConfig{Total: 2, Index: 3}}, nil, nil, nil, nil, nil); err == nil || !strings.Contains(err.Error(), "discovery.shard.index") {
		t.Errorf("invalid config: %v", err)
	}
	d, err := New(Config{}, nil, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(t.Context(), nil); err == nil {
		t.Error("nil update accepted")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := d.Run(ctx, func([]scrape.Target) {}); err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := d.Run(ctx, func([]scrape.Target) {}); err == nil {
		t.Error("second Run accepted")
	}
}

// A Discoverer rebuilt on a config reload registers on the same registry
// without a clash, and its metrics continue the old series.
func TestNewTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	d1, err := New(Config{}, nil, nil, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	d1.metrics.updates.Inc()
	d2, err := New(Config{}, nil, nil, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(d2.metrics.updates); got != 1 {
		t.Errorf("updates after rebuild = %v, want 1", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	n, err := testutil.GatherAndCount(reg, "watchdog_discovery_refresh_failures_total")
	if err != nil || n != 3 {
		t.Errorf("refresh failure series = %d (%v), want dns, kubernetes and file_sd at 0", n, err)
	}
}

func TestNewClientAndNamespace(t *testing.T) {
	client, err := NewClient("testdata/kubeconfig.yaml")
	if err != nil || client == nil {
		t.Fatalf("NewClient(kubeconfig): %v", err)
	}
	if _, err := NewClient("testdata/missing.yaml"); err == nil {
		t.Error("a missing kubeconfig accepted")
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := NewClient(""); err == nil {
		t.Error("in-cluster client built outside a cluster")
	}

	if got := ownNamespace("testdata/kubeconfig.yaml", serviceAccountNamespace); got != "models" {
		t.Errorf("kubeconfig namespace %q, want models", got)
	}
	if got := ownNamespace("", "testdata/serviceaccount/namespace"); got != "llm" {
		t.Errorf("service account namespace %q, want llm", got)
	}
	if got := ownNamespace("", "testdata/serviceaccount/missing"); got != "default" {
		t.Errorf("namespace outside a cluster %q, want default", got)
	}
}
