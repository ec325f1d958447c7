package discovery

import (
	"hash/fnv"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
)

// Shard returns the targets of shard cfg.Index out of cfg.Total, in their
// given order; with Total 0 or 1 it returns all of them. A target's shard is
// fnv32a(key) % Total, where key is its name, or with By "model" its
// "model" label (falling back to its name when it has none), so every
// replica of a model lands in the same shard and fleet-wide correlation
// stays within one watchdog. Across indices 0..Total-1 the shards
// partition any target set: no target is kept twice or dropped.
func Shard(targets []scrape.Target, cfg ShardConfig) []scrape.Target {
	if cfg.Total <= 1 {
		return targets
	}
	out := make([]scrape.Target, 0, len(targets)/cfg.Total+1)
	for _, t := range targets {
		if shardOf(t, cfg) == cfg.Index {
			out = append(out, t)
		}
	}
	return out
}

func shardOf(t scrape.Target, cfg ShardConfig) int {
	key := t.Name
	if cfg.By == ShardByModel {
		if m := t.Labels[LabelModel]; m != "" {
			key = m
		}
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(cfg.Total))
}
