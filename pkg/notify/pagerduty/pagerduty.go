// Package pagerduty delivers watchdog events to the PagerDuty Events API v2
// with go-pagerduty's Client (so the endpoint is configurable: EU region,
// proxies, tests). One call is one attempt; failures are classified for the
// shared queue in pkg/notify.
package pagerduty

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	pd "github.com/PagerDuty/go-pagerduty"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/httpclient"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// Events API endpoints.
const (
	DefaultEventsURL = "https://events.pagerduty.com/v2/enqueue"
	EUEventsURL      = "https://events.eu.pagerduty.com/v2/enqueue"
	enqueuePath      = "/v2/enqueue"
)

// Limits kept before sending.
const (
	MaxSummary      = 1024 // runes, PagerDuty rejects longer summaries
	maxDetailString = 2000 // runes per custom_details string
	maxDetailItems  = 20   // entries per custom_details list
	maxDedupKey     = 255
	maxErrorBody    = 2048
)

// Config configures the integration. Environment: PAGERDUTY_ROUTING_KEY
// (also PAGERDUTY_ROUTING_KEY_FILE), PAGERDUTY_EVENTS_URL.
type Config struct {
	RoutingKey notify.Secret `yaml:"routing_key"`
	// EventsURL is the full enqueue URL; default DefaultEventsURL, the EU
	// region is EUEventsURL.
	EventsURL string `yaml:"events_url"`
}

// Enabled reports whether a routing key is configured.
func (c Config) Enabled() bool { return c.RoutingKey.IsSet() }

// Validate reports every problem with YAML-relative paths. It never
// prints the routing key.
func (c Config) Validate() error {
	var errs []error
	if c.RoutingKey.IsSet() && strings.TrimSpace(string(c.RoutingKey)) != string(c.RoutingKey) {
		errs = append(errs, errors.New("routing_key: has leading or trailing white space"))
	}
	if _, err := baseURL(c.EventsURL); err != nil {
		errs = append(errs, fmt.Errorf("events_url: %w", err))
	}
	return errors.Join(errs...)
}

// baseURL turns the enqueue URL into the base go-pagerduty appends
// "/v2/enqueue" to.
func baseURL(events string) (string, error) {
	if events == "" {
		events = DefaultEventsURL
	}
	u, err := url.Parse(events)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", errors.New("want an http(s) URL such as " + DefaultEventsURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", errors.New("must not have a query, fragment or user info")
	}
	p := strings.TrimSuffix(u.Path, "/")
	switch {
	case strings.HasSuffix(p, enqueuePath):
		p = strings.TrimSuffix(p, enqueuePath)
	case p == "":
	default:
		return "", fmt.Errorf("path must end with %s", enqueuePath)
	}
	u.Path = p
	return u.String(), nil
}

// Notifier sends events to PagerDuty.
type Notifier struct {
	client     *pd.Client
	routingKey string
	secrets    redact.Secrets
	log        *zap.Logger
}

// New builds the notifier. httpClient nil gets a client with a 15 s timeout;
// the queue's attempt timeout bounds each call anyway.
func New(cfg Config, httpClient *http.Client, logger *zap.Logger) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.RoutingKey.IsSet() {
		return nil, errors.New("routing_key: required")
	}
	base, _ := baseURL(cfg.EventsURL)
	if httpClient == nil {
		httpClient = httpclient.New(notify.IntegrationPagerDuty, 15*time.Second)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	c := pd.NewClient("", pd.WithV2EventsAPIEndpoint(base))
	c.HTTPClient = capturingClient{inner: httpClient}
	key := string(cfg.RoutingKey)
	// The events URL may be a proxy's, with a credential in its path: an
	// error shows neither it nor the key.
	secrets := redact.Secrets{Values: []string{key, base}}
	return &Notifier{client: c, routingKey: key, secrets: secrets, log: logger}, nil
}

// Notify implements notify.Notifier (without incident context).
func (n *Notifier) Notify(ctx context.Context, ev notify.Event) error {
	return n.NotifyIncident(ctx, ev, nil)
}

// NotifyIncident implements notify.IncidentNotifier. PagerDuty dedups by
// dedup_key itself, so the only decision is whether a request is needed: a
// trigger opens the alert, an update that changes its severity or what it
// says (an escalation, a new cause, impact that grew) updates it with a new
// trigger on the same key, a resolve closes it. Repeats and updates that
// change neither send nothing (PagerDuty re-notifies through its
// escalation policy; a re-sent trigger after a restart is such an update).
func (n *Notifier) NotifyIncident(ctx context.Context, ev notify.Event, inc *notify.Incident) error {
	switch ev.Kind {
	case notify.KindRepeat:
		return notify.ErrNothingToSend
	case notify.KindUpdate:
		if inc != nil && inc.Open && inc.Last.Severity == ev.Severity && inc.Last.Headline == ev.Headline {
			return notify.ErrNothingToSend
		}
	}
	return n.send(ctx, BuildEvent(ev, n.routingKey))
}

// BuildEvent renders ev as an Events API v2 event.
func BuildEvent(ev notify.Event, routingKey string) *pd.V2Event {
	action := "trigger"
	if notify.Resolved(ev) {
		action = "resolve"
	}
	custom := details(ev)
	e := &pd.V2Event{
		RoutingKey: routingKey,
		Action:     action,
		DedupKey:   DedupKey(ev.Fingerprint),
		Client:     "sglang-watchdog",
		Payload: &pd.V2Payload{
			Summary:   Summary(ev),
			Source:    oneLine(ev.Replica),
			Severity:  ev.Severity.String(),
			Component: oneLine(ev.Model),
			Group:     oneLine(ev.Class),
			Class:     oneLine(ev.Class),
			Details:   &custom,
		},
	}
	if !ev.At.IsZero() {
		e.Payload.Timestamp = ev.At.UTC().Format(time.RFC3339)
	}
	if e.Payload.Source == "" {
		e.Payload.Source = "sglang-watchdog"
	}
	if isHTTP(ev.AlertURL) {
		e.ClientURL = ev.AlertURL
	}
	// Links need an absolute URL; a path on the watchdog (no base URL is
	// known) goes to the details, so the page still names it.
	for _, l := range []struct {
		href, text string
		path       *string
	}{{ev.RunbookURL, "Runbook: " + ev.Class, &custom.Runbook}, {ev.AlertURL, "Incident in sglang-watchdog", &custom.Alert}} {
		if isHTTP(l.href) {
			e.Links = append(e.Links, map[string]string{"href": l.href, "text": l.text})
		} else if strings.HasPrefix(l.href, "/") {
			*l.path = truncate(l.href, maxDetailString)
		}
	}
	return e
}

// DedupKey is the fingerprint, hashed only if it exceeds PagerDuty's limit.
func DedupKey(fingerprint string) string {
	if len(fingerprint) <= maxDedupKey {
		return fingerprint
	}
	sum := sha256.Sum256([]byte(fingerprint))
	return hex.EncodeToString(sum[:])
}

// Summary is the page's title (notify.Title), at most 1024 runes.
func Summary(ev notify.Event) string {
	return truncate(oneLine(notify.Title(ev)), MaxSummary)
}

type evidence struct {
	Name      string   `json:"name"`
	Text      string   `json:"text"`
	Value     float64  `json:"value"`
	Baseline  *float64 `json:"baseline,omitempty"`
	Unit      string   `json:"unit,omitempty"`
	Threshold string   `json:"threshold,omitempty"`
}

// recovery is one signal of a resolve: its value now beside its peak.
type recovery struct {
	Name string   `json:"name"`
	Text string   `json:"text"`
	Now  *float64 `json:"now,omitempty"`
	Peak *float64 `json:"peak,omitempty"`
	Unit string   `json:"unit,omitempty"`
}

type customDetails struct {
	Status    string     `json:"status"`
	Kind      string     `json:"kind"`
	Diagnosis string     `json:"diagnosis,omitempty"`
	Triage    string     `json:"triage,omitempty"`
	Replica   string     `json:"replica"`
	Model     string     `json:"model,omitempty"`
	Layer     string     `json:"layer,omitempty"`
	Evidence  []evidence `json:"evidence,omitempty"`
	Recovered []recovery `json:"recovered,omitempty"`
	// RecoveredOver is the span the recovered values cover ("last 15 s").
	RecoveredOver string   `json:"recovered_over,omitempty"`
	Emergency     []string `json:"emergency_steps,omitempty"`
	RootCause     []string `json:"root_cause_steps,omitempty"`
	ExplainedBy   []string `json:"explained_by,omitempty"`
	Explains      []string `json:"explains,omitempty"`
	StartsAt      string   `json:"starts_at,omitempty"`
	EndsAt        string   `json:"ends_at,omitempty"`
	Duration      string   `json:"duration,omitempty"`
	Fingerprint   string   `json:"fingerprint"`
	Seq           uint64   `json:"seq"`
	Truncated     bool     `json:"truncated,omitempty"`
	// Runbook and Alert are paths on the watchdog, set when no base URL
	// makes them links.
	Runbook string `json:"runbook,omitempty"`
	Alert   string `json:"alert,omitempty"`
}

// details caps every string and list so the event stays far below the
// 512 KB limit (at most ~150 KB even for absurd input).
func details(ev notify.Event) customDetails {
	d := customDetails{
		Status:      string(ev.Status),
		Kind:        string(ev.Kind),
		Diagnosis:   truncate(strings.TrimSpace(ev.Diagnosis), maxDetailString),
		Triage:      truncate(notify.Triage(ev), maxDetailString),
		Replica:     truncate(ev.Replica, maxDetailString),
		Model:       truncate(ev.Model, maxDetailString),
		Layer:       truncate(ev.Layer, maxDetailString),
		Fingerprint: ev.Fingerprint,
		Seq:         ev.Seq,
	}
	strs := func(in []string) []string {
		if len(in) > maxDetailItems {
			d.Truncated = true
			in = in[:maxDetailItems]
		}
		var out []string
		for _, s := range in {
			out = append(out, truncate(s, maxDetailString))
		}
		return out
	}
	if !notify.Resolved(ev) {
		d.Emergency = strs(ev.Emergency)
	}
	d.RootCause = strs(ev.RootCause)
	d.ExplainedBy = strs(ev.ExplainedBy)
	d.Explains = strs(ev.Explains)
	if notify.Resolved(ev) {
		rs := notify.Recoveries(ev)
		if len(rs) > 0 && ev.RecoveredSeconds > 0 {
			d.RecoveredOver = notify.NowLabel(ev)
		}
		if len(rs) > maxDetailItems {
			d.Truncated = true
			rs = rs[:maxDetailItems]
		}
		for _, r := range rs {
			rec := recovery{Name: truncate(r.Name, 200), Text: truncate(r.Text(), 500)}
			if r.Now != nil {
				rec.Now, rec.Unit = &r.Now.Value, truncate(r.Now.Unit, 50)
			}
			if r.Peak != nil {
				rec.Peak, rec.Unit = &r.Peak.Value, truncate(r.Peak.Unit, 50)
			}
			d.Recovered = append(d.Recovered, rec)
		}
	} else {
		fields := notify.Shown(ev.Evidence)
		if len(fields) > maxDetailItems {
			d.Truncated = true
			fields = fields[:maxDetailItems]
		}
		for _, f := range fields {
			e := evidence{
				Name:      truncate(f.Name, 200),
				Text:      truncate(notify.FormatField(f), 500),
				Value:     f.Value,
				Unit:      truncate(f.Unit, 50),
				Threshold: truncate(notify.Rule(f), 200),
			}
			if f.HasBase && notify.Finite(f.Baseline) {
				b := f.Baseline
				e.Baseline = &b
			}
			d.Evidence = append(d.Evidence, e)
		}
	}
	if !ev.StartsAt.IsZero() {
		d.StartsAt = ev.StartsAt.UTC().Format(time.RFC3339)
	}
	if !ev.EndsAt.IsZero() {
		d.EndsAt = ev.EndsAt.UTC().Format(time.RFC3339)
		if !ev.StartsAt.IsZero() {
			d.Duration = ev.EndsAt.Sub(ev.StartsAt).Round(time.Second).String()
		}
	}
	return d
}

const truncMark = "…(truncated)"

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	m := []rune(truncMark)
	return string(r[:n-len(m)]) + truncMark
}

func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

func isHTTP(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != ""
}

// send makes one request and classifies the outcome. Errors never contain
// the routing key or the URL.
func (n *Notifier) send(ctx context.Context, e *pd.V2Event) error {
	c := &capture{}
	_, err := n.client.ManageEventWithContext(context.WithValue(ctx, captureKey{}, c), e)
	if err == nil {
		return nil
	}
	what := "pagerduty " + e.Action
	switch {
	case c.transportErr != nil:
		terr := n.secrets.Error(c.transportErr)
		reason := notify.ReasonNetwork
		if errors.Is(c.transportErr, context.DeadlineExceeded) || notify.ReasonOf(terr) == notify.ReasonTimeout {
			reason = notify.ReasonTimeout
		}
		return notify.WithReason(fmt.Errorf("%s: %w", what, terr), reason)
	case c.status >= 200 && c.status < 300:
		return nil // accepted; only the response body was unexpected
	case c.status == 0:
		// The request was never sent (cannot happen with a valid config).
		return notify.WithReason(fmt.Errorf("%s: %s", what, n.redact(err.Error())), notify.ReasonUnknown)
	}
	body := n.redact(string(c.body))
	reason := notify.ReasonForStatus(c.status)
	herr := fmt.Errorf("%s: HTTP %d: %s", what, c.status, body)
	switch {
	case c.status == http.StatusTooManyRequests:
		return notify.ThrottledBy(herr, c.header)
	case c.status == http.StatusRequestTimeout || c.status >= 500:
		return notify.WithReason(herr, reason)
	default: // 400 invalid event, 401/403 bad key, 404, 413 too large, ...
		return notify.WithReason(notify.Permanent(herr), reason)
	}
}

// redact removes the routing key from text a server sent back.
func (n *Notifier) redact(s string) string {
	s = strings.TrimSpace(oneLine(n.secrets.String(s)))
	if s == "" {
		s = "(empty body)"
	}
	return truncate(s, maxErrorBody)
}

type captureKey struct{}

// capture records what go-pagerduty's Client discards: the transport error
// (it flattens it into a string), the status, Retry-After, and the Events
// API error body (go-pagerduty#476).
type capture struct {
	transportErr error
	status       int
	header       http.Header
	body         []byte
}

type capturingClient struct{ inner *http.Client }

func (cc capturingClient) Do(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(captureKey{}).(*capture)
	if c == nil {
		c = &capture{}
	}
	resp, err := cc.inner.Do(req)
	if err != nil {
		c.transportErr = err
		return nil, err
	}
	c.status = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		c.header = resp.Header
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		c.body = b
		resp.Body = io.NopCloser(bytes.NewReader(b))
	}
	return resp, nil
}
