// Package promsource reads SGLang replicas' samples from a
// Prometheus-compatible query API (Prometheus, Thanos Query, Mimir,
// VictoriaMetrics) instead of scraping them: history to fill the windows at
// start (query_range), and the latest samples of the whole fleet at each
// evaluation (`source: prometheus`). What it reads becomes exactly the
// series.Scrape the scraper would have produced (scrape.Normalizer), so the
// same assessment decides in every mode.
package promsource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// ErrTooLarge: a response exceeded Config.MaxResponseBytes.
var ErrTooLarge = errors.New("response too large")

// Options are the reader's process-level dependencies.
type Options struct {
	// Dial replaces the network for every connection (tests' in-memory
	// network); nil: the operating system's.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// MaxSeries bounds the normalized series of one replica at one step, as
	// scrape.max_series bounds a scrape.
	MaxSeries int
}

// Reader queries one API. It is safe for concurrent use.
type Reader struct {
	cfg     Config
	api     v1.API
	logger  *zap.Logger
	metrics *metrics
	opts    Options
}

// New builds a reader for cfg (validated by the caller); it sends nothing
// yet. Metrics are registered on reg.
func New(cfg Config, step time.Duration, opts Options, reg prometheus.Registerer, logger *zap.Logger) (*Reader, error) {
	if cfg.Step == 0 {
		cfg.Step = step
	}
	if cfg.Step <= 0 {
		return nil, errors.New("history.step: must be positive")
	}
	rt, err := commoncfg.NewRoundTripperFromConfig(cfg.HTTPClient, "sglang-watchdog", commoncfg.WithDialContextFunc(opts.Dial))
	if err != nil {
		return nil, fmt.Errorf("history: http client: %w", err)
	}
	client, err := api.NewClient(api.Config{
		Address: cfg.URL,
		// Every request runs under a context with cfg.Timeout (query).
		RoundTripper: limitedTransport{next: rt, max: cfg.MaxResponseBytes},
	})
	if err != nil {
		return nil, fmt.Errorf("history.url: %w", err)
	}
	guarded := &guardedClient{Client: client, max: cfg.MaxResponseBytes, secrets: redact.Secrets{URLs: []string{cfg.URL}}}
	return &Reader{cfg: cfg, api: v1.NewAPI(guarded), logger: logger, metrics: newMetrics(reg), opts: opts}, nil
}

// Step is the resolution of history reads.
func (r *Reader) Step() time.Duration { return r.cfg.Step }

// guardedClient bounds every response body and notices a partial answer
// that the v1 client does not surface: VictoriaMetrics' "isPartial": true
// (a cluster answering without some storage nodes). Thanos and Mimir say
// so in "warnings", which v1 returns.
type guardedClient struct {
	api.Client
	max int64
	// secrets hide a credential in the configured URL (?token=) from the
	// errors the HTTP client quotes it in, which end up in logs.
	secrets redact.Secrets
}

// partialKey carries a *bool through a request's context.
type partialKey struct{}

func (c *guardedClient) Do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	resp, body, err := c.Client.Do(ctx, req)
	if err != nil {
		return resp, body, c.secrets.Error(err)
	}
	if int64(len(body)) > c.max {
		return resp, nil, fmt.Errorf("%w: more than %d bytes (raise history.max_response_bytes, lower history.chunk or narrow history.selector)", ErrTooLarge, c.max)
	}
	if p, ok := ctx.Value(partialKey{}).(*bool); ok && bytes.Contains(body, []byte(`"isPartial"`)) {
		var flag struct {
			IsPartial bool `json:"isPartial"`
		}
		if json.Unmarshal(body, &flag) == nil && flag.IsPartial {
			*p = true
		}
	}
	return resp, body, nil
}

// limitedTransport cuts a body off past max bytes, so a huge answer costs at
// most max bytes of memory before it fails.
type limitedTransport struct {
	next http.RoundTripper
	max  int64
}

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	resp.Body = &capped{ReadCloser: resp.Body, left: t.max + 1}
	return resp, nil
}

type capped struct {
	io.ReadCloser
	left int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, io.EOF // guardedClient sees max+1 bytes and fails the request
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.ReadCloser.Read(p)
	c.left -= int64(n)
	return n, err
}

// answer is one query's result with what the API said about its
// completeness.
type answer struct {
	value   model.Value
	partial bool // warnings or isPartial: some data may be missing
}

// rangeNone makes query run an instant query.
var rangeNone v1.Range

// query runs an instant query (rng zero) or a range query.
func (r *Reader) query(ctx context.Context, kind, q string, at time.Time, rng v1.Range) (answer, error) {
	partial := false
	ctx = context.WithValue(ctx, partialKey{}, &partial)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	var (
		val      model.Value
		warnings v1.Warnings
		err      error
	)
	if rng.Step > 0 {
		val, warnings, _, err = r.api.QueryRange(ctx, q, rng)
	} else {
		val, warnings, _, err = r.api.Query(ctx, q, at)
	}
	if err != nil {
		r.metrics.queries.WithLabelValues(kind, errorKind(err)).Inc()
		return answer{}, fmt.Errorf("%s query: %w", kind, err)
	}
	if len(warnings) > 0 || partial {
		r.metrics.queries.WithLabelValues(kind, "partial").Inc()
		r.logger.Warn("the API answered with possibly incomplete data", zap.String("query", kind),
			zap.Strings("warnings", warnings), zap.Bool("is_partial", partial))
	} else {
		r.metrics.queries.WithLabelValues(kind, "ok").Inc()
	}
	return answer{value: val, partial: partial || len(warnings) > 0}, nil
}

// errorKind is the result label of a failed query.
func errorKind(err error) string {
	var apiErr *v1.Error
	var netErr net.Error
	switch {
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.As(err, &apiErr):
		switch apiErr.Type {
		case v1.ErrTimeout:
			return "timeout"
		case v1.ErrServer:
			return "server_error"
		case v1.ErrBadData, v1.ErrClient:
			return "bad_request"
		}
		return "bad_response"
	}
	return "error"
}

// point is one sample of one series at one instant.
type point struct {
	at    time.Time
	value float64
}

// fleetSeries is one series of the answer, assigned to its replica.
type fleetSeries struct {
	replica string
	name    string
	labels  []series.Label
	points  []point
}

// split turns an answer's series into the fleet's, dropping those without
// the replica label (they cannot be attributed).
func (r *Reader) split(v model.Value) ([]fleetSeries, error) {
	var out []fleetSeries
	add := func(m model.Metric, pts []point) {
		replica := string(m[model.LabelName(r.cfg.ReplicaLabel)])
		if replica == "" || len(pts) == 0 {
			return
		}
		out = append(out, fleetSeries{replica: replica, name: string(m[model.MetricNameLabel]), labels: r.ownLabels(m), points: pts})
	}
	switch v := v.(type) {
	case model.Matrix:
		for _, s := range v {
			pts := make([]point, len(s.Values))
			for i, p := range s.Values {
				pts[i] = point{p.Timestamp.Time(), float64(p.Value)}
			}
			add(s.Metric, pts)
		}
	case model.Vector:
		for _, s := range v {
			add(s.Metric, []point{{s.Timestamp.Time(), float64(s.Value)}})
		}
	default:
		return nil, fmt.Errorf("unexpected result type %s", v.Type())
	}
	return out, nil
}

// ownLabels are the replica's own labels of a series: without the name,
// the replica label and the target labels Prometheus added, and with the
// names Prometheus moved to exported_<name> restored.
func (r *Reader) ownLabels(m model.Metric) []series.Label {
	out := make([]series.Label, 0, len(m))
	for name, value := range m {
		n := string(name)
		if n == model.MetricNameLabel || n == r.cfg.ReplicaLabel || slices.Contains(r.cfg.TargetLabels, n) {
			continue
		}
		out = append(out, series.Label{Name: strings.TrimPrefix(n, "exported_"), Value: string(value)})
	}
	slices.SortFunc(out, func(a, b series.Label) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// gatewayFamily reports whether a family is the model gateway's.
func gatewayFamily(name string) bool {
	return strings.HasPrefix(name, "smg_") || strings.HasPrefix(name, "sgl_router_")
}

// failedUp is why a replica whose up is 0 is down: Prometheus could not
// scrape it (the reason stays in Prometheus).
const failedUp = "up is 0 in Prometheus: its scrape of the replica failed"

// scrapesAt groups the points of the fleet's series by replica and instant
// and normalizes each group into one scrape, ordered by time then replica.
// An instant where up is 0 and the replica exposes nothing is a failed
// scrape (series.FailureAbsent).
func scrapesAt(fleet []fleetSeries, norm *scrape.Normalizer) []series.Scrape {
	type key struct {
		replica string
		at      int64
	}
	type instant struct {
		raw     []scrape.RawSample
		up      float64
		hasUp   bool
		gateway bool
		gpu     bool // a dcgm-exporter's
	}
	// Families in name order, as the exposition parser hands them over.
	slices.SortStableFunc(fleet, func(a, b fleetSeries) int { return strings.Compare(a.name, b.name) })
	byKey := map[key]*instant{}
	for i := range fleet {
		s := &fleet[i]
		for _, p := range s.points {
			k := key{s.replica, p.at.UnixMilli()}
			in := byKey[k]
			if in == nil {
				in = &instant{}
				byKey[k] = in
			}
			if s.name == "up" {
				in.up, in.hasUp = p.value, true
				continue
			}
			in.gateway = in.gateway || gatewayFamily(s.name)
			in.gpu = in.gpu || strings.HasPrefix(s.name, "DCGM_FI_")
			in.raw = append(in.raw, scrape.RawSample{Name: s.name, Labels: s.labels, Value: p.value})
		}
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.at != b.at {
			return int(a.at - b.at)
		}
		return strings.Compare(a.replica, b.replica)
	})
	out := make([]series.Scrape, 0, len(keys))
	for _, k := range keys {
		in := byKey[k]
		at := time.UnixMilli(k.at)
		t := scrape.Target{Name: k.replica, Kind: scrape.KindEngine}
		switch {
		case in.gateway:
			t.Kind = scrape.KindGateway
		case in.gpu:
			t.Kind = scrape.KindGPU
		}
		switch {
		case in.hasUp && in.up == 0:
			out = append(out, series.Scrape{Target: k.replica, Kind: t.Kind, At: at, Reason: series.FailureAbsent, Error: failedUp})
			continue
		case len(in.raw) == 0:
			continue
		}
		out = append(out, norm.Scrape(t, at, in.raw))
	}
	return out
}
