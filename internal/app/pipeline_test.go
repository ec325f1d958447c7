package app

import (
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/discovery"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// TestSourcePrometheusShardsByModel: replicas found in Prometheus are
// sharded as discovered targets are: by the model their samples name, so
// every replica of a model lands in one shard and the shards partition
// the fleet.
func TestSourcePrometheusShardsByModel(t *testing.T) {
	models := []string{"m-a", "m-b", "m-c", "m-d", "m-e", "m-f"}
	owner := map[string]int{}
	for index := range 2 {
		cfg := config.Default()
		cfg.Source, cfg.History.URL = config.SourcePrometheus, "http://prometheus:9090"
		cfg.Discovery.Shard = discovery.ShardConfig{Total: 2, Index: index, By: "model"}
		h, err := newHistory(cfg, nil, nil, time.Hour, nil, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if h.keep == nil || h.poller == nil {
			t.Fatal("no shard filter or no poller for source: prometheus with a shard")
		}
		for _, m := range models {
			for _, replica := range []string{"r1", "r2", "r3"} {
				sc := series.Scrape{Target: replica + "-" + m, Groups: []series.Group{{Model: m}}}
				if !h.keep(sc) {
					continue
				}
				if prev, ok := owner[m]; ok && prev != index {
					t.Errorf("model %s is in shards %d and %d", m, prev, index)
				}
				owner[m] = index
			}
		}
	}
	if len(owner) != len(models) {
		t.Errorf("models kept by some shard: %v, want all of %v", owner, models)
	}
}

// TestHistoryChangesNeedARestart: the reader and the source are bound at
// start-up; a reload that changes them says so instead of pretending.
func TestHistoryChangesNeedARestart(t *testing.T) {
	old := config.Default()
	next := config.Default()
	next.Source = config.SourcePrometheus
	next.History.URL = "http://prometheus:9090"
	next.History.HTTPClient.BearerToken = "changed"
	got := restartOnly(old, next)
	if !slices.Contains(got, "source") || !slices.Contains(got, "history") {
		t.Errorf("restart-only settings %v, want source and history", got)
	}
	if got := restartOnly(old, config.Default()); len(got) != 0 {
		t.Errorf("unchanged configuration reported as %v", got)
	}
}

// The Alertmanager notifier is built at start-up: changing it is reported
// as needing a restart, not ignored.
func TestAlertmanagerChangeNeedsARestart(t *testing.T) {
	next := config.Default()
	next.Notify.Alertmanager.URLs = []string{"http://alertmanager:9093"}
	if got := restartOnly(config.Default(), next); !slices.Contains(got, "notify") {
		t.Errorf("restart-only settings %v, want notify", got)
	}
}
