package discovery

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
)

// podServers plays SGLang servers behind pod IPs, in memory (network I/O
// is not durably blocking in a synctest bubble): a server that is loading (or
// crashed) refuses connections, as SGLang does until weights are loaded and
// CUDA graphs captured; a serving one answers with steady traffic.
type podServers struct {
	mu      sync.Mutex
	servers map[string]*server // by host:port
}

type server struct {
	serving bool
	scrapes int // since the process started: counters restart with it
}

func (f *podServers) set(host string, serving, restarted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.servers[host+":30000"]
	if s == nil {
		s = &server{}
		f.servers[host+":30000"] = s
	}
	s.serving = serving
	if restarted {
		s.scrapes = 0
	}
}

func (f *podServers) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.servers[req.URL.Host]
	if s == nil || !s.serving {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	s.scrapes++
	n := float64(s.scrapes)
	const model = `{model_name="llama"}`
	var b strings.Builder
	for _, g := range []struct {
		name string
		v    float64
	}{{"num_running_reqs", 40}, {"num_queue_reqs", 2}, {"token_usage", 0.5}, {"gen_throughput", 3000}} {
		fmt.Fprintf(&b, "# TYPE sglang:%s gauge\nsglang:%s{tp_rank=\"0\"} %g\n", g.name, g.name, g.v)
	}
	for _, c := range []struct {
		name string
		v    float64
	}{{"num_requests_total", 50}, {"prompt_tokens_total", 50000}, {"cached_tokens_total", 35000},
		{"generation_tokens_total", 15000}, {"num_retracted_requests_total", 0}, {"realtime_tokens_total", 65000}} {
		fmt.Fprintf(&b, "# TYPE sglang:%s counter\nsglang:%s%s %g\n", c.name, c.name, model, c.v*n)
	}
	fmt.Fprintf(&b, "# TYPE sglang:http_requests_total counter\nsglang:http_requests_total{endpoint=\"/v1/chat/completions\",method=\"POST\"} %g\n", 50*n)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain; version=0.0.4"}},
		Body: io.NopCloser(strings.NewReader(b.String())), Request: req}, nil
}

// rolloutPod is a fresh pod of the rollout: created now, not Ready.
func rolloutPod(name, ip string) *corev1.Pod {
	p := newPod("llm", name, ip, false, sglangLabels("llama", "decode"))
	p.CreationTimestamp = metav1.NewTime(time.Now())
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "sglang",
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(time.Now())}}}}
	return p
}

// TestRolloutPagesNothingCriticalButACrashLoopDoes is the rollout
// acceptance test, through discovery (a fake clientset), the scraper, the
// window and every default detector, in virtual time: pods are replaced
// one by one, each refusing connections for minutes while it loads (one of
// them longer than the startup budget); nothing critical is found, and the
// slow one is a cold_start warning. Then a pod that served starts to crash
// and restart (OOM-killed): that crash loop is critical; and an evicted pod
// is an outage.
func TestRolloutPagesNothingCriticalButACrashLoopDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		f := &podServers{servers: map[string]*server{}}
		var pods []*corev1.Pod
		for i, name := range []string{"sglang-0", "sglang-1", "sglang-2"} {
			ip := fmt.Sprintf("10.1.0.%d", i+1)
			p := rolloutPod(name, ip)
			setReady(true)(p)
			pods = append(pods, p)
			f.set(ip, true, true)
		}
		cs := fake.NewClientset(pods[0], pods[1], pods[2])

		cfg := detect.DefaultConfig()
		detectors, err := detect.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		store, err := window.New(window.Options{Retention: cfg.MaxLookback() + time.Minute}, nil)
		if err != nil {
			t.Fatal(err)
		}
		mgr, err := scrape.New(nil, scrape.Options{Client: &http.Client{Transport: f}}, store, prometheus.NewRegistry(), nil)
		if err != nil {
			t.Fatal(err)
		}
		disc, err := newDiscoverer(kubeConfig(nil), nil, cs, nil, prometheus.NewRegistry(), zap.NewNop(), testOptions)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { _ = mgr.Run(ctx) })
		wg.Go(func() {
			_ = disc.Run(ctx, func(ts []scrape.Target) {
				if err := mgr.SetTargets(ts); err != nil {
					t.Errorf("targets rejected: %v", err)
				}
			})
		})
		defer wg.Wait()
		defer cancel()

		// findings of every detector over every replica, now.
		evaluate := func() []detect.Finding {
			var out []detect.Finding
			now := time.Now()
			for _, r := range store.Replicas() {
				store.View(r.Name, func(w detect.Window) {
					for _, d := range detectors {
						out = append(out, d.Detect(w, now)...)
					}
				})
			}
			return out
		}
		start := time.Now()
		var critical, warnings []string
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		until := func(at time.Duration) {
			for time.Since(start) < at {
				<-tick.C
				synctest.Wait()
				for _, fd := range evaluate() {
					line := fmt.Sprintf("%s %s %s at %s: %s", fd.Severity, fd.Class, fd.Replica, time.Since(start), fd.Summary)
					switch {
					case fd.Severity == detect.Critical && !fd.Resolving:
						critical = append(critical, line)
					case fd.Severity == detect.Warning:
						warnings = append(warnings, line)
					}
				}
			}
		}
		// replace deletes old and creates its successor, which loads (refusing
		// connections) for loading, then serves and turns Ready.
		replace := func(old, name, ip string, loading time.Duration) {
			remove(t, cs, "llm", old)
			create(t, cs, rolloutPod(name, ip))
			until(time.Since(start) + loading)
			f.set(ip, true, true)
			mutate(t, cs, "llm", name, setReady(true))
		}

		until(10 * time.Minute) // a healthy fleet, windows filled
		replace("sglang-0", "sglang-0-v2", "10.1.1.1", 5*time.Minute)
		until(16 * time.Minute)
		replace("sglang-1", "sglang-1-v2", "10.1.1.2", 17*time.Minute) // slower than the 15 min budget
		until(35 * time.Minute)
		replace("sglang-2", "sglang-2-v2", "10.1.1.3", 5*time.Minute)
		until(45 * time.Minute)
		if len(critical) > 0 {
			t.Fatalf("the rollout paged critical:\n%s", strings.Join(critical, "\n"))
		}
		slow := false
		for _, w := range warnings {
			slow = slow || strings.Contains(w, "cold_start llm.sglang-1-v2")
			if strings.Contains(w, "replica_down") {
				t.Errorf("rollout reported as an outage: %s", w)
			}
		}
		if !slow {
			t.Errorf("the pod loading past the startup budget raised no cold_start warning:\n%s", strings.Join(warnings, "\n"))
		}

		// A served pod gets OOM-killed three times, each restart reloading
		// for a minute: a crash loop.
		for i := 1; i <= 3; i++ {
			f.set("10.1.1.3", false, true)
			mutate(t, cs, "llm", "sglang-2-v2", func(p *corev1.Pod) {
				setReady(false)(p)
				p.Status.ContainerStatuses[0].RestartCount = int32(i)
				p.Status.ContainerStatuses[0].LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					Reason: "OOMKilled", ExitCode: 137, FinishedAt: metav1.NewTime(time.Now())}}
			})
			until(time.Since(start) + time.Minute)
			f.set("10.1.1.3", true, true)
			mutate(t, cs, "llm", "sglang-2-v2", setReady(true))
			until(time.Since(start) + 2*time.Minute)
		}
		var loop []string
		for _, c := range critical {
			if strings.Contains(c, "replica_down llm.sglang-2-v2") {
				loop = append(loop, c)
			}
		}
		if len(loop) == 0 || !strings.Contains(strings.Join(loop, "\n"), "Crash loop: 3 restarts") {
			t.Errorf("the crash loop paged no critical replica_down crash loop:\n%s", strings.Join(critical, "\n"))
		}
		if len(loop) != len(critical) {
			t.Errorf("critical findings beside the crash loop:\n%s", strings.Join(critical, "\n"))
		}

		// An evicted pod is an outage (not a scale-down retired as "target
		// removed"): it stays a target and pages critical, with the reason.
		critical = nil
		mutate(t, cs, "llm", "sglang-0-v2", func(p *corev1.Pod) {
			setReady(false)(p)
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		})
		until(time.Since(start) + time.Minute)
		if !strings.Contains(strings.Join(critical, "\n"), "critical replica_down llm.sglang-0-v2") ||
			!strings.Contains(strings.Join(critical, "\n"), "pod evicted: The node was low on resource: memory") {
			t.Errorf("the eviction paged no critical replica_down naming it:\n%s", strings.Join(critical, "\n"))
		}
	})
}
