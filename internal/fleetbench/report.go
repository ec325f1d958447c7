package fleetbench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Report is what one run measured. Every number is computed here once; the
// text, Markdown and JSON outputs only render it.
type Report struct {
	Replicas        int     `json:"replicas"`
	IntervalSeconds float64 `json:"interval_seconds"`
	// EvaluationIntervalSeconds is the daemon's evaluation.interval.
	EvaluationIntervalSeconds float64 `json:"evaluation_interval_seconds"`
	WarmupSeconds             float64 `json:"warmup_seconds"`
	// WindowSeconds is how long the measurement really lasted: at least
	// the duration asked for.
	WindowSeconds float64 `json:"window_seconds"`
	Incident      string  `json:"incident,omitempty"`
	// HostCPUs and HostLoad1m (the 1-minute load average at the end) say
	// how much else competed for the CPUs: on a busy machine both children
	// are starved and their timings stretch.
	HostCPUs   int     `json:"host_cpus"`
	HostLoad1m float64 `json:"host_load_1m"`

	Watchdog   Measurement  `json:"watchdog"`
	Prometheus *Measurement `json:"prometheus,omitempty"`
	// Ratios are watchdog ÷ Prometheus; per replica they are the same, as
	// both watch the same fleet.
	Ratios *Ratios `json:"ratios_watchdog_to_prometheus,omitempty"`
	// Profiles are the daemon's profile files (Options.ProfileDir): its
	// CPU over the measurement, then its heap at the end.
	Profiles []string `json:"profiles,omitempty"`
}

// Measurement is one child's cost over the window.
type Measurement struct {
	CPUCores float64 `json:"cpu_cores"` // average over the window
	RSSBytes uint64  `json:"rss_bytes"` // at the end
	// HeapInuseBytes is the Go heap in use at the end
	// (go_memstats_heap_inuse_bytes; both are Go programs): RSS less the
	// garbage collector's headroom and the runtime's own.
	HeapInuseBytes uint64 `json:"heap_inuse_bytes"`
	// RSSFileBytes is the part of RSS at the end that maps files (RssFile
	// of /proc/<pid>/status): the pages of the executable the process has
	// touched, for Prometheus also its memory-mapped TSDB chunks. The
	// daemon's does not grow with its windows.
	RSSFileBytes uint64 `json:"rss_file_bytes"`
	// StackInuseBytes is the goroutine stacks at the end
	// (go_memstats_stack_inuse_bytes): the daemon runs a scrape loop per
	// replica, and a health-probe loop per engine when probing is on (as
	// it is by default).
	StackInuseBytes uint64 `json:"stack_inuse_bytes"`
	// RSSGrowthBytesPerMinute is the least-squares slope of the samples.
	RSSGrowthBytesPerMinute float64 `json:"rss_growth_bytes_per_minute"`
	MillicoresPerReplica    float64 `json:"millicores_per_replica"`
	RSSBytesPerReplica      float64 `json:"rss_bytes_per_replica"`
	// SamplesPerSecond ingested: watchdog_samples_ingested_total for the
	// daemon, prometheus_tsdb_head_samples_appended_total for Prometheus.
	SamplesPerSecond float64 `json:"samples_per_second"`
	// ReplicasScraped is how many replicas the fleet saw it scrape within
	// the window.
	ReplicasScraped int `json:"replicas_scraped"`
	// Daemon is the daemon's own account of its work (watchdog only).
	Daemon *DaemonTimings `json:"daemon,omitempty"`
}

// DaemonTimings come from the daemon's /metrics histograms over the window
// (bucket interpolation, as histogram_quantile does).
type DaemonTimings struct {
	Scrapes          uint64   `json:"scrapes"`
	ScrapeP50        Quantile `json:"scrape_p50"`
	ScrapeP99        Quantile `json:"scrape_p99"`
	Rounds           uint64   `json:"evaluation_rounds"`
	RoundMeanSeconds float64  `json:"evaluation_round_mean_seconds"`
	RoundP99         Quantile `json:"evaluation_round_p99"`
	// WindowBytes is the windows' memory at the end by the store's own
	// accounting (watchdog_window_bytes summed over the targets).
	WindowBytes float64 `json:"window_bytes"`
}

// Quantile is an estimate from histogram buckets.
type Quantile struct {
	Seconds float64 `json:"seconds"`
	// AtLeast: the quantile lies past the histogram's last finite bucket,
	// whose bound is all Seconds can say.
	AtLeast bool `json:"at_least,omitempty"`
}

// Ratios compare the daemon with Prometheus.
type Ratios struct {
	CPU float64 `json:"cpu"`
	RSS float64 `json:"rss"`
}

type memPoint struct {
	at  time.Time
	rss uint64
}

func measure(replicas int, begin, end usage, memory []memPoint) (Measurement, error) {
	secs := end.at.Sub(begin.at).Seconds()
	if secs <= 0 {
		return Measurement{}, errors.New("empty measurement window")
	}
	m := Measurement{
		CPUCores:                (end.cpuSeconds - begin.cpuSeconds) / secs,
		RSSBytes:                end.rss,
		RSSFileBytes:            end.rssFile,
		RSSGrowthBytesPerMinute: slopePerMinute(memory),
	}
	m.MillicoresPerReplica = 1000 * m.CPUCores / float64(replicas)
	m.RSSBytesPerReplica = float64(m.RSSBytes) / float64(replicas)
	return m, nil
}

// slopePerMinute fits rss = a + b·t by least squares and returns b per
// minute: the trend, robust to a collection in the middle.
func slopePerMinute(points []memPoint) float64 {
	if len(points) < 2 {
		return 0
	}
	t0 := points[0].at
	var n, sx, sy, sxx, sxy float64
	for _, p := range points {
		x, y := p.at.Sub(t0).Minutes(), float64(p.rss)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

func (r *Report) compare() {
	if r.Prometheus == nil || r.Prometheus.CPUCores == 0 || r.Prometheus.RSSBytes == 0 {
		return
	}
	r.Ratios = &Ratios{
		CPU: r.Watchdog.CPUCores / r.Prometheus.CPUCores,
		RSS: float64(r.Watchdog.RSSBytes) / float64(r.Prometheus.RSSBytes),
	}
}

// The daemon's own metrics a report reads.
const (
	scrapeDurationMetric = "watchdog_scrape_duration_seconds"
	roundDurationMetric  = "watchdog_evaluation_duration_seconds"
	samplesMetric        = "watchdog_samples_ingested_total"
	windowBytesMetric    = "watchdog_window_bytes"
	heapInuseMetric      = "go_memstats_heap_inuse_bytes"
	stackInuseMetric     = "go_memstats_stack_inuse_bytes"
)

func daemonTimings(begin, end map[string]*dto.MetricFamily, window time.Duration) (DaemonTimings, float64, error) {
	scrapes, err := histogramDelta(begin, end, scrapeDurationMetric, "kind", "engine")
	if err != nil {
		return DaemonTimings{}, 0, err
	}
	rounds, err := histogramDelta(begin, end, roundDurationMetric, "", "")
	if err != nil {
		return DaemonTimings{}, 0, err
	}
	samples, err := counterRate(begin, end, samplesMetric, window)
	if err != nil {
		return DaemonTimings{}, 0, err
	}
	windowBytes, err := gaugeSum(end, windowBytesMetric)
	if err != nil {
		return DaemonTimings{}, 0, err
	}
	t := DaemonTimings{
		Scrapes: scrapes.count, ScrapeP50: scrapes.quantile(0.5), ScrapeP99: scrapes.quantile(0.99),
		Rounds: rounds.count, RoundP99: rounds.quantile(0.99), WindowBytes: windowBytes,
	}
	if rounds.count > 0 {
		t.RoundMeanSeconds = rounds.sum / float64(rounds.count)
	}
	return t, samples, nil
}

// histogramWindow is a histogram's growth between two scrapes of it.
type histogramWindow struct {
	bounds []float64 // upper bounds, +Inf excluded
	cum    []float64 // cumulative counts per bound
	count  uint64
	sum    float64
}

func histogramDelta(begin, end map[string]*dto.MetricFamily, name, label, value string) (histogramWindow, error) {
	b, err := findHistogram(begin, name, label, value)
	if err != nil {
		return histogramWindow{}, err
	}
	e, err := findHistogram(end, name, label, value)
	if err != nil {
		return histogramWindow{}, err
	}
	w := histogramWindow{count: e.GetSampleCount() - b.GetSampleCount(), sum: e.GetSampleSum() - b.GetSampleSum()}
	if len(b.GetBucket()) != len(e.GetBucket()) {
		return histogramWindow{}, fmt.Errorf("%s: buckets changed between scrapes", name)
	}
	for i, eb := range e.GetBucket() {
		if math.IsInf(eb.GetUpperBound(), 1) {
			continue
		}
		w.bounds = append(w.bounds, eb.GetUpperBound())
		w.cum = append(w.cum, float64(eb.GetCumulativeCount()-b.GetBucket()[i].GetCumulativeCount()))
	}
	return w, nil
}

func findHistogram(fams map[string]*dto.MetricFamily, name, label, value string) (*dto.Histogram, error) {
	for _, m := range fams[name].GetMetric() {
		if m.GetHistogram() == nil {
			continue
		}
		if label == "" {
			return m.GetHistogram(), nil
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				return m.GetHistogram(), nil
			}
		}
	}
	if label != "" {
		return nil, fmt.Errorf("no histogram %s{%s=%q}", name, label, value)
	}
	return nil, fmt.Errorf("no histogram %s", name)
}

// quantile interpolates linearly within the bucket holding rank q·count,
// as PromQL's histogram_quantile does; past the last finite bound it
// answers that bound, marked AtLeast. Zero when the window holds no
// observation.
func (w histogramWindow) quantile(q float64) Quantile {
	if w.count == 0 || len(w.bounds) == 0 {
		return Quantile{}
	}
	rank := q * float64(w.count)
	i := sort.SearchFloat64s(w.cum, rank)
	if i == len(w.bounds) {
		return Quantile{Seconds: w.bounds[len(w.bounds)-1], AtLeast: true}
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = w.bounds[i-1], w.cum[i-1]
	}
	if w.cum[i] == below {
		return Quantile{Seconds: w.bounds[i]}
	}
	return Quantile{Seconds: lower + (w.bounds[i]-lower)*(rank-below)/(w.cum[i]-below)}
}

// gaugeSum is a gauge family's value summed over its series.
func gaugeSum(fams map[string]*dto.MetricFamily, name string) (float64, error) {
	f, ok := fams[name]
	if !ok {
		return 0, fmt.Errorf("no gauge %s", name)
	}
	total := 0.0
	for _, m := range f.GetMetric() {
		total += m.GetGauge().GetValue()
	}
	return total, nil
}

// counterRate is the per-second growth of a counter family (all its series
// summed) between two scrapes.
func counterRate(begin, end map[string]*dto.MetricFamily, name string, window time.Duration) (float64, error) {
	sum := func(fams map[string]*dto.MetricFamily) (float64, bool) {
		f, ok := fams[name]
		if !ok {
			return 0, false
		}
		total := 0.0
		for _, m := range f.GetMetric() {
			total += m.GetCounter().GetValue()
		}
		return total, true
	}
	b, okb := sum(begin)
	e, oke := sum(end)
	if !okb || !oke {
		return 0, fmt.Errorf("no counter %s", name)
	}
	if window <= 0 {
		return 0, errors.New("empty measurement window")
	}
	return (e - b) / window.Seconds(), nil
}

// Formats Write renders.
const (
	FormatText     = "text"
	FormatMarkdown = "markdown"
	FormatJSON     = "json"
)

// CheckFormat reports whether Write knows format.
func CheckFormat(format string) error {
	switch format {
	case FormatText, FormatMarkdown, FormatJSON:
		return nil
	}
	return fmt.Errorf("unknown output format %q (want %s, %s or %s)", format, FormatText, FormatMarkdown, FormatJSON)
}

// Write renders the report as text (aligned columns), markdown (a table
// to paste into a README) or json.
func (r Report) Write(w io.Writer, format string) error {
	if err := CheckFormat(format); err != nil {
		return err
	}
	if format == FormatJSON {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(r)
	}
	head := fmt.Sprintf("%d loopback replicas at %s (the watchdog evaluating every %s), measured over %s after a %s warm-up",
		r.Replicas, secs(r.IntervalSeconds), secs(r.EvaluationIntervalSeconds), secs(r.WindowSeconds), secs(r.WarmupSeconds))
	if r.Incident != "" {
		head += fmt.Sprintf(" (incident %s on one replica in eight)", r.Incident)
	}
	head += fmt.Sprintf("; host: %d CPUs, load average %.1f at the end", r.HostCPUs, r.HostLoad1m)
	rows := r.rows()
	if format == FormatMarkdown {
		fmt.Fprintf(w, "%s:\n\n", head)
		for i, row := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			if i == 0 {
				fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", len(row)))
			}
		}
	} else {
		fmt.Fprintf(w, "watchdog-bench fleet: %s\n\n", head)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Profiles) > 0 {
		_, err := fmt.Fprintf(w, "\nthe daemon's profiles (go tool pprof -top FILE): %s\n", strings.Join(r.Profiles, ", "))
		return err
	}
	return nil
}

// rows is the report as a table: a header, then one row per quantity.
func (r Report) rows() [][]string {
	wd, p := r.Watchdog, r.Prometheus
	header := []string{"what", "watchdog"}
	if p != nil {
		header = append(header, "prometheus", "watchdog ÷ prometheus")
	}
	rows := [][]string{header}
	add := func(what string, w string, pv func(Measurement) string, ratio string) {
		row := []string{what, w}
		if p != nil {
			row = append(row, pv(*p), ratio)
		}
		rows = append(rows, row)
	}
	ratio := func(f func(Ratios) float64) string {
		if r.Ratios == nil {
			return "-"
		}
		return fmt.Sprintf("%.2f", f(*r.Ratios))
	}
	cores := func(m Measurement) string { return fmt.Sprintf("%.3f", m.CPUCores) }
	rss := func(m Measurement) string { return mib(float64(m.RSSBytes)) }
	add("CPU, cores (average)", cores(wd), cores, ratio(func(x Ratios) float64 { return x.CPU }))
	add("RSS, MiB (end)", rss(wd), rss, ratio(func(x Ratios) float64 { return x.RSS }))
	heap := func(m Measurement) string { return mib(float64(m.HeapInuseBytes)) }
	add("Go heap in use, MiB (end)", heap(wd), heap, "")
	stacks := func(m Measurement) string { return mib(float64(m.StackInuseBytes)) }
	add("goroutine stacks, MiB (end)", stacks(wd), stacks, "")
	files := func(m Measurement) string { return mib(float64(m.RSSFileBytes)) }
	add("of RSS, mapped files, MiB (end)", files(wd), files, "")
	growth := func(m Measurement) string { return mib(m.RSSGrowthBytesPerMinute) }
	add("RSS growth, MiB/min", growth(wd), growth, "")
	perCPU := func(m Measurement) string { return fmt.Sprintf("%.3f", m.MillicoresPerReplica) }
	add("CPU per replica, millicores", perCPU(wd), perCPU, ratio(func(x Ratios) float64 { return x.CPU }))
	perRSS := func(m Measurement) string { return fmt.Sprintf("%.1f", m.RSSBytesPerReplica/1024) }
	add("RSS per replica, KiB", perRSS(wd), perRSS, ratio(func(x Ratios) float64 { return x.RSS }))
	samples := func(m Measurement) string { return fmt.Sprintf("%.0f", m.SamplesPerSecond) }
	add("samples ingested /s", samples(wd), samples, "")
	scraped := func(m Measurement) string { return fmt.Sprintf("%d/%d", m.ReplicasScraped, r.Replicas) }
	add("replicas scraped in the window", scraped(wd), scraped, "")
	if d := wd.Daemon; d != nil {
		none := func(Measurement) string { return "" }
		add("scrape latency p50 / p99, ms", fmt.Sprintf("%s / %s", msq(d.ScrapeP50), msq(d.ScrapeP99)), none, "")
		add("evaluation round mean / p99, ms", fmt.Sprintf("%s / %s", ms(d.RoundMeanSeconds), msq(d.RoundP99)), none, "")
		add("scrapes / evaluation rounds", fmt.Sprintf("%d / %d", d.Scrapes, d.Rounds), none, "")
		add("windows per replica, KiB (accounted, end)", fmt.Sprintf("%.1f", d.WindowBytes/float64(r.Replicas)/1024), none, "")
	}
	return rows
}

func mib(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }
func ms(s float64) string  { return fmt.Sprintf("%.2f", s*1000) }
func msq(q Quantile) string {
	if q.AtLeast {
		return "≥" + ms(q.Seconds)
	}
	return ms(q.Seconds)
}
func secs(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}
