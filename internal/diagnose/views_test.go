package diagnose

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/server"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

type dropEvents struct{}

func (dropEvents) Send(notify.Event) {}

// TestDiagnoseAPIAndDaemonAgreeOnOneWindow feeds one observation of a
// replica in a preemption storm to `watchdog diagnose`, and the same
// scrapes to the daemon's window, evaluation loop and HTTP API: the layer
// and every number of the snapshot are the same in all three, because all
// render the one assessment.
func TestDiagnoseAPIAndDaemonAgreeOnOneWindow(t *testing.T) {
	const step = 10 * time.Second
	var bodies []string
	s := engineState{running: 8, queued: 47, kvUsage: 0.97, retracted: 100, decode: 1e6,
		prefillCompute: 5e5, prefillCache: 5e5, finished: 1000,
		ttft: repeat(0.5, 100), queueTime: repeat(0.1, 100), itl: repeat(0.05, 1000), e2e: repeat(5, 100)}
	for range 7 {
		bodies = append(bodies, expo(s))
		s.retracted += 30
		s.decode += 3000
		s.finished += 20
		s.prefillCache += 4000
		s.prefillCompute += 6000
		s.ttft = append(s.ttft, repeat(2, 20)...)
		s.queueTime = append(s.queueTime, repeat(1.5, 20)...)
		s.itl = append(s.itl, repeat(0.08, 300)...)
	}
	obs := observe(t, "storm", step, bodies...)

	// diagnose: a one-shot over the observation.
	rep, err := Diagnose(Observation{Interval: step, Samples: len(bodies), Targets: []TargetObservation{obs}}, detect.DefaultConfig(),
		Options{Interval: step, Samples: len(bodies)})
	if err != nil {
		t.Fatal(err)
	}
	oneShot := rep.Targets[0]

	// The daemon: the same scrapes in its window, one evaluation round with
	// the same triage range the one-shot used, the API rendering it.
	cfg := detect.DefaultConfig()
	cfg.Triage.Range = 6*step + step/2
	ds, err := detect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := window.New(window.Options{Retention: cfg.MaxLookback(), ScrapeInterval: step}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range obs.Scrapes {
		if err := store.Append(sc); err != nil {
			t.Fatal(err)
		}
	}
	loop := eval.New(eval.Options{Interval: step,
		Assessor: assess.New(ds, assess.Config{Triage: cfg.Triage, Correlation: correlate.DefaultConfig()}),
		Tracker:  alert.NewTracker(alert.DefaultConfig()), Windows: store, Sender: dropEvents{}, Logger: zap.NewNop()},
		prometheus.NewRegistry())
	now := obs.Scrapes[len(obs.Scrapes)-1].At
	loop.Evaluate(now)
	daemon, ok := loop.Round().Replica("storm")
	if !ok {
		t.Fatal("the daemon's round has no replica storm")
	}
	srv, err := server.New("127.0.0.1:0", server.Options{Gatherer: prometheus.NewRegistry(), Alerts: loop, Logger: zap.NewNop(), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- srv.Run(ctx) }()
	defer func() { stop(); <-served }()
	resp, err := http.Get("http://" + srv.Addr() + "/api/v1/watchdog/targets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc struct {
		Targets []struct {
			Replica  string              `json:"replica"`
			Snapshot assess.Snapshot     `json:"snapshot"`
			Triage   detect.TriageResult `json:"triage"`
		} `json:"targets"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || len(doc.Targets) != 1 {
		t.Fatalf("API: %v, %+v", err, doc)
	}

	if daemon.Triage.Verdict == "" || daemon.Triage.Verdict == detect.TriageUnknown {
		t.Fatalf("no layer verdict: %+v", daemon.Triage)
	}
	layers := []detect.TriageVerdict{oneShot.Layer.Verdict, daemon.Triage.Verdict, doc.Targets[0].Triage.Verdict}
	if len(slices.Compact(slices.Clone(layers))) != 1 {
		t.Errorf("layer: diagnose %s, daemon %s, API %s", layers[0], layers[1], layers[2])
	}
	if oneShot.Layer.Reason != daemon.Triage.Reason || doc.Targets[0].Triage.Reason != daemon.Triage.Reason {
		t.Errorf("triage numbers:\n diagnose %s\n daemon   %s\n API      %s", oneShot.Layer.Reason, daemon.Triage.Reason, doc.Targets[0].Triage.Reason)
	}
	want := daemon.Snapshot
	for name, got := range map[string]assess.Snapshot{"diagnose": oneShot.State, "API": doc.Targets[0].Snapshot} {
		for _, c := range []struct {
			field string
			a, b  *float64
		}{
			{"running", got.RunningRequests, want.RunningRequests},
			{"queued", got.QueuedRequests, want.QueuedRequests},
			{"KV usage", got.KVUsage, want.KVUsage},
			{"prefix hit rate", got.PrefixHitRate, want.PrefixHitRate},
			{"throughput", got.GenThroughput, want.GenThroughput},
			{"retractions/s", got.RetractionsPerSecond, want.RetractionsPerSecond},
			{"TTFT p99", got.TTFTP99, want.TTFTP99},
			{"ITL p99", got.ITLP99, want.ITLP99},
		} {
			if c.a == nil || c.b == nil || *c.a != *c.b {
				t.Errorf("%s %s = %v, daemon %v", name, c.field, deref(c.a), deref(c.b))
			}
		}
	}
}
