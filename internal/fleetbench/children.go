package fleetbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/internal/sim"
)

// prometheusUserAgent is how Prometheus introduces itself to a target.
const prometheusUserAgent = "Prometheus/"

// stopGrace is how long a child has to exit after SIGTERM before it is
// killed.
const stopGrace = 10 * time.Second

// child is a process under measurement: its command, the loopback address
// of its HTTP server and its log.
type child struct {
	name, addr, log string
	cmd             *exec.Cmd
	// client reads the child's /-/ready and /metrics: a few requests a
	// minute, so a fresh connection each time, never one the child closed
	// as idle meanwhile.
	client *http.Client
	cancel context.CancelFunc
	done   chan struct{}
	err    error // once done is closed
}

func (c *child) url(path string) string { return "http://" + c.addr + path }

// start runs name with args, its output in dir/<name>.log. Cancelling its
// context (stop) sends SIGTERM, then SIGKILL after stopGrace; it also dies
// with this process (see dieWithParent).
func start(ctx context.Context, dir, name, addr, exe string, args ...string) (*child, error) {
	log := filepath.Join(dir, name+".log")
	out, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer out.Close() // the child holds its own descriptor
	ctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = stopGrace
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &child{
		name: name, addr: addr, log: log, cmd: cmd, cancel: cancel, done: make(chan struct{}),
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second},
	}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// stop ends the child and waits for it.
func (c *child) stop() {
	c.cancel()
	<-c.done
}

// exited is an error once the child has exited, with the end of its log.
func (c *child) exited() error {
	select {
	case <-c.done:
	default:
		return nil
	}
	return fmt.Errorf("%s exited (%v); the end of its log:\n%s", c.name, c.err, c.logTail())
}

func (c *child) logTail() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// waitReady polls the child's /-/ready until it answers 200.
func (c *child) waitReady(ctx context.Context, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	ticks, stop := o.Clock.NewTicker(pollEvery)
	defer stop()
	for {
		if err := c.exited(); err != nil {
			return err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/-/ready"), nil)
		if resp, err := c.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s: %w; the end of its log:\n%s", c.name, o.ReadyTimeout, ctx.Err(), c.logTail())
		case <-ticks:
		}
	}
}

// usage is what a child consumed up to one instant.
type usage struct {
	at         time.Time
	cpuSeconds float64 // user + system, /proc/<pid>/stat
	rss        uint64  // bytes, VmRSS of /proc/<pid>/status
	rssFile    uint64  // bytes, RssFile of /proc/<pid>/status: mapped files
	metrics    map[string]*dto.MetricFamily
}

func (c *child) usage(now time.Time) (usage, error) {
	p, err := procfs.NewProc(c.cmd.Process.Pid)
	if err != nil {
		return usage{}, fmt.Errorf("%s: %w", c.name, err)
	}
	stat, err := p.Stat()
	if err != nil {
		return usage{}, fmt.Errorf("%s: %w", c.name, err)
	}
	status, err := p.NewStatus()
	if err != nil {
		return usage{}, fmt.Errorf("%s: %w", c.name, err)
	}
	return usage{at: now, cpuSeconds: stat.CPUTime(), rss: status.VmRSS, rssFile: status.RssFile}, nil
}

// sampleAll reads every child's usage and its own /metrics.
func sampleAll(ctx context.Context, o Options, children []*child) ([]usage, error) {
	out := make([]usage, len(children))
	for i, c := range children {
		u, err := c.usage(o.Clock.Now())
		if err != nil {
			return nil, err
		}
		if u.metrics, err = c.metrics(ctx); err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

func (c *child) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/metrics"), nil)
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s /metrics: %w", c.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s /metrics: HTTP %d", c.name, resp.StatusCode)
	}
	var body bytes.Buffer
	if _, err := body.ReadFrom(resp.Body); err != nil {
		return nil, fmt.Errorf("%s /metrics: %w", c.name, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(&body)
	if err != nil {
		return nil, fmt.Errorf("%s /metrics: %w", c.name, err)
	}
	return fams, nil
}

// watchdogConfig is the part of the daemon's configuration file a run sets;
// everything else keeps its production default.
type watchdogConfig struct {
	ListenAddress string           `yaml:"listen_address"`
	LogLevel      string           `yaml:"log_level"`
	Scrape        intervalSetting  `yaml:"scrape"`
	Evaluation    intervalSetting  `yaml:"evaluation"`
	Targets       []watchdogTarget `yaml:"targets"`
}

type intervalSetting struct {
	Interval string `yaml:"interval"`
}

type watchdogTarget struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	Kind string `yaml:"kind"`
}

func startWatchdog(ctx context.Context, o Options, dir, fleetAddr string) (*child, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := watchdogConfig{
		ListenAddress: addr, LogLevel: "warn",
		Scrape: intervalSetting{o.Interval.String()}, Evaluation: intervalSetting{o.EvaluationInterval.String()},
	}
	for i := range o.Replicas {
		cfg.Targets = append(cfg.Targets, watchdogTarget{Name: replicaName(i), URL: "http://" + fleetAddr + sim.MetricsPath(i), Kind: "engine"})
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path, err := writeFile(dir, "watchdog.yaml", b)
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--config.file=" + path}
	if o.ProfileDir != "" {
		args = append(args, "--web.enable-pprof")
	}
	return start(ctx, dir, "watchdog", addr, o.Watchdog, args...)
}

// profile saves what the child's pprof endpoint path answers into file. A
// CPU profile takes as long as it asks for, so no client timeout bounds
// it: ctx and the child's end do. On failure no file is left behind: a
// truncated profile would still open in go tool pprof, showing less than
// was measured.
func (c *child) profile(ctx context.Context, path, file string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path), nil)
	resp, err := (&http.Client{Transport: c.client.Transport}).Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", c.name, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: HTTP %d: %s", c.name, path, resp.StatusCode, bytes.TrimSpace(msg))
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, resp.Body); err != nil {
		out.Close()
		os.Remove(file)
		return fmt.Errorf("%s %s: %w", c.name, path, err)
	}
	if err := out.Close(); err != nil {
		os.Remove(file)
		return err
	}
	return nil
}

// prometheusConfig scrapes every replica of the fleet: one target group per
// replica, since they share one address and differ by path (and instance).
type prometheusConfig struct {
	Global struct {
		ScrapeInterval string `yaml:"scrape_interval"`
		ScrapeTimeout  string `yaml:"scrape_timeout"`
	} `yaml:"global"`
	ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
}

type scrapeConfig struct {
	JobName       string        `yaml:"job_name"`
	StaticConfigs []targetGroup `yaml:"static_configs"`
}

type targetGroup struct {
	Targets []string          `yaml:"targets"`
	Labels  map[string]string `yaml:"labels"`
}

func startPrometheus(ctx context.Context, o Options, dir, fleetAddr string) (*child, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	var cfg prometheusConfig
	cfg.Global.ScrapeInterval = o.Interval.String()
	// The daemon's default timeout: 80% of the interval.
	cfg.Global.ScrapeTimeout = (o.Interval * 8 / 10).String()
	job := scrapeConfig{JobName: "sglang"}
	for i := range o.Replicas {
		job.StaticConfigs = append(job.StaticConfigs, targetGroup{
			Targets: []string{fleetAddr},
			Labels:  map[string]string{"__metrics_path__": sim.MetricsPath(i), "instance": replicaName(i)},
		})
	}
	cfg.ScrapeConfigs = []scrapeConfig{job}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path, err := writeFile(dir, "prometheus.yml", b)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "prometheus-data")
	if err := os.Mkdir(data, 0o700); err != nil {
		return nil, err
	}
	return start(ctx, dir, "prometheus", addr, o.Prometheus,
		"--config.file="+path, "--storage.tsdb.path="+data, "--web.listen-address="+addr, "--log.level=warn")
}
