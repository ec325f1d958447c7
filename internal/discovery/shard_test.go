package discovery

import (
	"fmt"
	"testing"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// fleet is a set of targets over a few models, some without one.
func fleet(n int) []scrape.Target {
	models := []string{"llama-3-70b", "qwen-2.5-72b", "deepseek-v3", "mistral-7b", "gemma-2-27b", ""}
	out := make([]scrape.Target, n)
	for i := range out {
		out[i] = scrape.Target{Name: fmt.Sprintf("llm.sglang-%d", i), URL: fmt.Sprintf("http://10.0.%d.%d:30000/metrics", i/250, i%250), Kind: scrape.KindEngine}
		if m := models[i%len(models)]; m != "" {
			out[i].Labels = map[string]string{LabelModel: m, "role": "decode"}
		}
	}
	return out
}

// For every shard count, the shards partition the fleet: each target is
// kept by exactly one index.
func TestShardPartitionsTheFleet(t *testing.T) {
	targets := fleet(300)
	for _, by := range []string{ShardByTarget, ShardByModel} {
		for total := 1; total <= 8; total++ {
			owner := map[string]int{}
			for index := range total {
				for _, tg := range Shard(targets, ShardConfig{Total: total, Index: index, By: by}) {
					if prev, dup := owner[tg.Name]; dup {
						t.Fatalf("by %s, total %d: %s kept by shards %d and %d", by, total, tg.Name, prev, index)
					}
					owner[tg.Name] = index
				}
			}
			if len(owner) != len(targets) {
				t.Fatalf("by %s, total %d: %d of %d targets covered", by, total, len(owner), len(targets))
			}
			if by == ShardByTarget && total > 1 {
				// Hashing spreads the load: no shard is empty.
				used := map[int]bool{}
				for _, i := range owner {
					used[i] = true
				}
				if len(used) != total {
					t.Errorf("by target, total %d: only %d shards used", total, len(used))
				}
			}
		}
	}
}

// By model, every replica of a model lands in one shard, so fleet-wide
// correlation (all replicas of a model degrading together) stays within
// one watchdog; targets without a model are spread by name.
func TestShardByModelKeepsAModelTogether(t *testing.T) {
	targets := fleet(300)
	for total := 2; total <= 8; total++ {
		shardOfModel := map[string]int{}
		noModel := map[int]bool{}
		for index := range total {
			for _, tg := range Shard(targets, ShardConfig{Total: total, Index: index, By: ShardByModel}) {
				m := tg.Labels[LabelModel]
				if m == "" {
					noModel[index] = true
					continue
				}
				if prev, seen := shardOfModel[m]; seen && prev != index {
					t.Fatalf("total %d: model %s split over shards %d and %d", total, m, prev, index)
				}
				shardOfModel[m] = index
			}
		}
		if len(noModel) < 2 {
			t.Errorf("total %d: targets without a model all in one shard; want them spread by name", total)
		}
	}
}

func TestShardIsStableAndKeepsOrder(t *testing.T) {
	targets := fleet(50)
	cfg := ShardConfig{Total: 3, Index: 1, By: ShardByTarget}
	a, b := Shard(targets, cfg), Shard(targets, cfg)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("shard sizes %d, %d", len(a), len(b))
	}
	pos := map[string]int{}
	for i, tg := range targets {
		pos[tg.Name] = i
	}
	for i := range a {
		if a[i].Name != b[i].Name {
			t.Fatalf("unstable at %d: %s vs %s", i, a[i].Name, b[i].Name)
		}
		if i > 0 && pos[a[i].Name] < pos[a[i-1].Name] {
			t.Fatalf("order changed: %s before %s", a[i-1].Name, a[i].Name)
		}
	}
	// Without sharding everything is kept.
	for _, total := range []int{0, 1} {
		if got := Shard(targets, ShardConfig{Total: total}); len(got) != len(targets) {
			t.Errorf("total %d kept %d of %d", total, len(got), len(targets))
		}
	}
}
