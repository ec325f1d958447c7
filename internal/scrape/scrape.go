// Package scrape polls SGLang engines and model gateways for their
// Prometheus /metrics, normalizes every exposition variant onto the
// canonical names of pkg/series and hands each outcome, success or failure,
// to an Appender (the window store).
//
// Data flows one way: this package only produces series.Scrape values.
package scrape

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Target kinds.
const (
	KindEngine  = "engine"
	KindGateway = "gateway"
	// KindGPU is an NVIDIA dcgm-exporter (one per GPU node): each GPU it
	// exposes is a replica of kind "gpu" (normalizeGPU).
	KindGPU = "gpu"
)

// Kinds lists every target kind.
func Kinds() []string { return []string{KindEngine, KindGateway, KindGPU} }

// Target is one endpoint to scrape.
type Target struct {
	Name string // unique; the replica name downstream
	URL  string // full metrics URL (config has normalized it); may hold credentials
	Kind string // KindEngine, KindGateway or KindGPU
	// Labels is metadata from discovery (pod labels such as model or role),
	// copied onto every scrape of the target; read-only once handed over.
	Labels map[string]string
	// Pod is the Kubernetes status of the pod behind the target, copied
	// onto every scrape; nil for targets not discovered from Kubernetes.
	// A change of it alone updates the running loop without restarting it.
	// Read-only once handed over.
	Pod *series.Pod
	// HTTPClient are the target's own client settings (TLS, credentials,
	// proxy), in place of the Manager's (Options.HTTPClient, the scrape
	// level); nil takes the Manager's. Targets of one source share the
	// pointer, and so one client. Read-only once handed over.
	HTTPClient *HTTPClientConfig
}

// Equal reports whether two targets are the same (a changed target restarts
// its loop). The pod status is not part of a target's identity.
func (t Target) Equal(o Target) bool {
	return t.Name == o.Name && t.URL == o.URL && t.Kind == o.Kind && maps.Equal(t.Labels, o.Labels) && t.HTTPClient.Equal(o.HTTPClient)
}

// address is where the target serves, as a gateway names its workers:
// the metrics URL's scheme and host (series.WorkerAddress). SGLang serves
// /metrics on its API port, so it is the address a gateway sends to.
func (t Target) address() string {
	u, err := url.Parse(t.URL)
	if err != nil || u.Host == "" {
		return ""
	}
	return series.WorkerAddress(u.Scheme + "://" + u.Host)
}

// Appender receives every scrape outcome. The window store implements it;
// it is called concurrently from one goroutine per target. The Scrape's
// groups, samples and labels are the scraper's buffers, reused by its next
// scrape once Append has returned: an Appender copies what it keeps. An
// error (e.g. too many series) is logged and counted, never fatal.
type Appender interface {
	Append(s series.Scrape) error
}

// targetRemover is optionally implemented by an Appender that keeps
// per-target state to forget when a target goes away.
type targetRemover interface {
	Remove(target string)
}

// Options tune scraping. Zero values take the defaults below.
type Options struct {
	Interval     time.Duration // between scrapes of one target; default 5s
	Timeout      time.Duration // per scrape, < Interval; default 80% of Interval
	MaxBodyBytes int64         // exposition size limit, inflated if compressed; default 16 MiB
	MaxSeries    int           // normalized series per scrape; default 100,000
	UserAgent    string        // default "sglang-watchdog"
	// Client performs the requests of targets without client settings of
	// their own; its redirect policy is replaced by the scraper's (same
	// host only). Nil: a client New builds from HTTPClient (never
	// http.DefaultClient, which has no timeout and is shared).
	Client *http.Client
	// HTTPClient are the client settings of targets without their own when
	// Client is nil; nil takes DefaultHTTPClientConfig.
	HTTPClient *HTTPClientConfig
	// Dial, when not nil, replaces the operating system's network for the
	// clients New builds (a test's in-memory one).
	Dial Dialer
	// HealthProbeInterval > 0 turns on the active probe of engine targets'
	// /health_generate (hang detection), on its own schedule, never
	// blocking a scrape; its result is added to the next scrape: to a
	// successful one as HealthGenerateUp and HealthGenerateDuration, to a
	// failed one as its ProbeUp (see probe.go).
	// Default 0: off. Suggested: DefaultHealthProbeInterval.
	HealthProbeInterval time.Duration
	// HealthProbeTimeout bounds one probe; default DefaultHealthProbeTimeout,
	// or 90% of HealthProbeInterval if that is shorter.
	HealthProbeTimeout time.Duration
	// HealthProbeConcurrency bounds the probes in flight across all
	// targets; default DefaultHealthProbeConcurrency. A probe that finds
	// no free slot waits, and a probe still waiting when its next one is
	// due is skipped, so a hung fleet never piles probes up.
	HealthProbeConcurrency int
	// AcceptGzip asks targets to gzip-compress their exposition, for
	// targets across a link where bytes cost more than CPU: SGLang's
	// prometheus_client then compresses the current exposition's 70 KB to
	// ≈7 KB on every scrape, and inflating it makes a scrape ≈1.6 times as
	// costly for the watchdog (BenchmarkScrapeOverHTTP). Default false:
	// identity is asked for. A target that compresses anyway is inflated
	// either way.
	AcceptGzip bool
	// KeepFamilies are the canonical families (a histogram by its base
	// name) the parser keeps; every other sample is dropped from its name
	// bytes before its labels are read. Nil keeps every family.
	KeepFamilies []string
	// FilterFamilies asks engine targets for the kept families only
	// (prometheus_client's name[] parameters, namefilter.go), when
	// KeepFamilies is set; gateways and GPU exporters are always scraped
	// in full. A target whose filtered answer is rejected is scraped in
	// full for FilterRecheck (default DefaultFilterRecheck).
	FilterFamilies bool
	FilterRecheck  time.Duration
}

// Defaults.
const (
	DefaultInterval     = 5 * time.Second
	DefaultMaxBodyBytes = 16 << 20
	DefaultMaxSeries    = 100_000
	DefaultUserAgent    = "sglang-watchdog"
)

// withDefaults fills zero fields and validates the result.
func (o Options) withDefaults() (Options, error) {
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout == 0 {
		o.Timeout = o.Interval * 8 / 10
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxSeries == 0 {
		o.MaxSeries = DefaultMaxSeries
	}
	if o.UserAgent == "" {
		o.UserAgent = DefaultUserAgent
	}
	if o.HealthProbeInterval > 0 && o.HealthProbeTimeout == 0 {
		o.HealthProbeTimeout = min(DefaultHealthProbeTimeout, o.HealthProbeInterval*9/10)
	}
	if o.HealthProbeConcurrency == 0 {
		o.HealthProbeConcurrency = DefaultHealthProbeConcurrency
	}
	if o.FilterRecheck == 0 {
		o.FilterRecheck = DefaultFilterRecheck
	}
	var errs []error
	if o.Interval < 0 {
		errs = append(errs, fmt.Errorf("scrape interval %s must be positive", o.Interval))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("scrape timeout %s must be positive", o.Timeout))
	}
	if o.Interval > 0 && o.Timeout >= o.Interval {
		// A scrape still running when the next is due would queue scrapes
		// behind a slow replica.
		errs = append(errs, fmt.Errorf("scrape timeout %s must be shorter than the interval %s", o.Timeout, o.Interval))
	}
	if o.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("max body bytes %d must be positive", o.MaxBodyBytes))
	}
	if o.MaxSeries < 0 {
		errs = append(errs, fmt.Errorf("max series %d must be positive", o.MaxSeries))
	}
	if o.HealthProbeInterval < 0 || o.HealthProbeTimeout < 0 {
		errs = append(errs, fmt.Errorf("health probe interval %s and timeout %s must not be negative", o.HealthProbeInterval, o.HealthProbeTimeout))
	}
	if o.FilterRecheck < 0 {
		errs = append(errs, fmt.Errorf("family filter recheck %s must be positive", o.FilterRecheck))
	}
	if o.HealthProbeConcurrency < 0 {
		errs = append(errs, fmt.Errorf("health probe concurrency %d must be positive", o.HealthProbeConcurrency))
	}
	if o.HealthProbeInterval > 0 && o.HealthProbeTimeout >= o.HealthProbeInterval {
		errs = append(errs, fmt.Errorf("health probe timeout %s must be shorter than the probe interval %s", o.HealthProbeTimeout, o.HealthProbeInterval))
	}
	return o, errors.Join(errs...)
}

// validateTargets checks names are unique and set, kinds known and URLs
// absolute http(s). Messages name the target, never its URL (credentials).
func validateTargets(ts []Target) error {
	var errs []error
	seen := make(map[string]bool, len(ts))
	for i, t := range ts {
		switch {
		case t.Name == "":
			errs = append(errs, fmt.Errorf("target #%d: empty name", i))
			continue
		case seen[t.Name]:
			errs = append(errs, fmt.Errorf("target %q: duplicate name", t.Name))
		}
		seen[t.Name] = true
		if !slices.Contains(Kinds(), t.Kind) {
			errs = append(errs, fmt.Errorf("target %q: kind %q is not one of %s", t.Name, t.Kind, strings.Join(Kinds(), ", ")))
		}
		u, err := url.Parse(t.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("target %q: URL must be an absolute http(s) URL", t.Name))
		}
	}
	return errors.Join(errs...)
}

// ScrapeOnce fetches and normalizes one target once, for a CLI or a smoke
// test. Zero Options fields take the defaults; a nil client gets a
// dedicated one, built from t.HTTPClient when the target has settings of
// its own. Invalid options, or a client that cannot be built, come back as
// a failed scrape.
func ScrapeOnce(ctx context.Context, client *http.Client, t Target, opts Options) series.Scrape {
	opts, err := opts.withDefaults()
	switch {
	case err != nil:
	case client != nil:
		client = withRedirectPolicy(client)
	case t.HTTPClient != nil:
		if client, err = NewClientFromConfig(*t.HTTPClient, opts.Dial); err == nil {
			defer client.CloseIdleConnections()
		}
	default:
		client = newDefaultClient(opts.Timeout)
		defer client.CloseIdleConnections()
	}
	if err != nil {
		return series.Scrape{Target: t.Name, Kind: t.Kind, Labels: t.Labels, Address: t.address(), Pod: t.Pod, At: time.Now(), Reason: series.FailureError, Error: err.Error()}
	}
	return newScraper(httpFetcher(oneClient(client), opts), opts).scrape(ctx, t, nil)
}

// scraper holds the buffers of one scrape, reused by the next (of any
// target): the body buffer, the parser and the normalizer keep their
// capacity, so steady-state scrapes allocate little beyond what they hand
// to the Appender. Not safe for concurrent use.
type scraper struct {
	fetch     fetchFunc
	timeout   time.Duration
	maxSeries int
	body      responseBody
	keep      keepSet
	parser    Parser
	raw       []RawSample
	norm      *normalizer
}

func newScraper(fetch fetchFunc, opts Options) *scraper {
	keep := newKeepSet(opts.KeepFamilies)
	return &scraper{
		fetch:     fetch,
		timeout:   opts.Timeout,
		maxSeries: opts.MaxSeries,
		keep:      keep,
		parser:    newTextParser(keep.filter()),
		norm:      newScrapeNormalizer(),
	}
}

// newScrapeNormalizer is a normalizer whose output is read only until the
// next scrape (the Appender contract), so it reuses its output arrays.
func newScrapeNormalizer() *normalizer {
	n := newNormalizer()
	n.reuse = true
	return n
}

// scrape runs one scrape, filtered by f when f is not nil. The clock is
// read here only to stamp the scrape (the data's own time), measure its
// duration and time f's recheck.
func (s *scraper) scrape(ctx context.Context, t Target, f *familyFilter) series.Scrape {
	start := time.Now()
	sc := series.Scrape{Target: t.Name, Kind: t.Kind, Labels: t.Labels, Address: t.address(), Pod: t.Pod, At: start}
	if t.Pod != nil && t.Pod.Phase == string(corev1PodFailed) {
		// The pod is gone for good; its IP may already serve another pod.
		sc.Reason, sc.Error = series.FailurePodFailed, "pod "+t.Pod.Phase+podReason(t.Pod)+": not scraped"
		return sc
	}
	fail := s.collect(ctx, t, &sc, f)
	if fail != nil {
		sc.Reason, sc.Status, sc.Error = fail.reason, fail.status, fail.msg
	}
	sc.Duration = time.Since(start)
	return sc
}

// corev1PodFailed is Kubernetes' PodFailed phase (this package does not
// import the API types for one constant).
const corev1PodFailed = "Failed"

func podReason(p *series.Pod) string {
	if p.Reason == "" {
		return ""
	}
	return " (" + p.Reason + ")"
}

// collect fetches and normalizes into sc.Groups; a failure comes back
// typed. With f active it asks for the kept families only and, if the
// answer is one it cannot trust, asks again in full within the same
// timeout.
func (s *scraper) collect(ctx context.Context, t Target, sc *series.Scrape, f *familyFilter) *fetchError {
	fetchCtx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	defer s.shrink()
	if f != nil {
		f.outcome = filterFull
	}
	if f.active(sc.At) {
		ft := t
		ft.URL = f.url(t.URL)
		fe := s.fetchParse(fetchCtx, ft)
		switch {
		case fe == nil && f.covers(s.raw):
			f.outcome = filterFiltered
			return s.normalize(t, sc)
		case fe != nil && fe.status == 0:
			return fe // no answer at all: the target, not the filter
		}
		f.reject(sc.At)
		f.outcome = filterFallback
	}
	if fe := s.fetchParse(fetchCtx, t); fe != nil {
		return fe
	}
	if f.wantsLearning(sc.At) {
		f.learnFrom(s.raw)
	}
	return s.normalize(t, sc)
}

// fetchParse fetches t's exposition and parses it into s.raw.
func (s *scraper) fetchParse(ctx context.Context, t Target) *fetchError {
	if err := s.fetch(ctx, t, &s.body); err != nil {
		fe, ok := errors.AsType[*fetchError](err)
		if !ok {
			fe = classify(ctx, err, t.URL)
		}
		return fe
	}
	raw, err := s.parser.Parse(s.raw[:0], s.body.Bytes())
	s.raw = raw
	if err != nil {
		if looksLikeHTML(s.body.Bytes()) {
			return &fetchError{reason: series.FailureNotMetrics, status: http.StatusOK,
				msg: "an HTML page instead of metrics (a login or proxy page?)"}
		}
		// Parse errors quote a line number and a short token, not the URL.
		return &fetchError{reason: series.FailureParse, status: http.StatusOK, msg: err.Error()}
	}
	return nil
}

// normalize turns s.raw into sc.Groups.
func (s *scraper) normalize(t Target, sc *series.Scrape) *fetchError {
	var (
		groups []series.Group
		err    error
	)
	if t.Kind == KindGPU {
		groups, err = normalizeGPU(s.raw, s.maxSeries, s.norm.aliases)
	} else {
		groups, err = s.norm.normalizeParsed(s.raw, s.maxSeries, s.parser)
	}
	if err != nil {
		return &fetchError{reason: series.FailureTooManySeries, status: http.StatusOK, msg: fmt.Sprintf("more than %d series after normalization", s.maxSeries)}
	}
	sc.Groups = groups
	return nil
}

// looksLikeHTML reports whether a body that failed to parse starts like an
// HTML document (served without an HTML Content-Type).
func looksLikeHTML(body []byte) bool {
	head := bytes.ToLower(bytes.TrimSpace(body[:min(len(body), 512)]))
	return bytes.HasPrefix(head, []byte("<!doctype html")) || bytes.HasPrefix(head, []byte("<html")) || bytes.HasPrefix(head, []byte("<head"))
}

// shrink drops buffers that one outsized response grew far beyond the
// usual, so a single spike does not pin memory (or make every later reset
// of a huge map slow) for the life of the scraper.
func (s *scraper) shrink() {
	const maxBody, maxSamples = 4 << 20, 1 << 16
	if s.body.Cap() > maxBody {
		s.body.Buffer = bytes.Buffer{}
	}
	if cap(s.raw) > maxSamples {
		s.raw = nil
		s.parser = newTextParser(s.keep.filter())
		s.norm = newScrapeNormalizer()
	}
}
