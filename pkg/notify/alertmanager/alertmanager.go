// Package alertmanager delivers watchdog incidents to Prometheus
// Alertmanager's /api/v2/alerts, so that teams that route every alert
// through Alertmanager (routing trees, silences, inhibition, receivers)
// get the watchdog's pages there too. One call is one attempt, posted to
// every configured Alertmanager of one cluster; failures are classified for
// the shared queue in pkg/notify.
//
// Alertmanager forgets a firing alert once its endsAt passes, so, as
// Prometheus does, every firing alert is sent with endsAt = now + 4 ×
// resend interval and re-sent every resend interval while the incident is
// open (the queue calls back through notify.Refresher); a resolve is sent
// with endsAt = the time the incident ended.
package alertmanager

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// Name is the integration's name in routes, metrics and state.
const Name = "alertmanager"

// AlertsPath is the API path appended to each configured Alertmanager URL.
const AlertsPath = "/api/v2/alerts"

// DefaultResendInterval is Prometheus's default resend delay.
const DefaultResendInterval = time.Minute

// endsAtResends is how many resend intervals a firing alert stays firing
// in Alertmanager without a refresh: Prometheus's factor, so one or two
// lost refreshes do not resolve an alert that is still firing.
const endsAtResends = 4

// refLabels is the key under which records written before alertState kept
// the one label set last sent.
const refLabels = "alertmanager_labels"

const (
	maxErrorBody      = 1024
	maxAnnotationRune = 4000
)

// Config configures the integration.
type Config struct {
	// URLs are the Alertmanagers of one cluster (base URLs such as
	// http://alertmanager:9093; AlertsPath is appended). Every event goes
	// to each of them, as Prometheus does: they deduplicate among
	// themselves, and one of them accepting it is a delivery.
	URLs []string `yaml:"urls"`
	// HTTPClient is Prometheus's HTTP client configuration: basic auth,
	// authorization, OAuth2, TLS, proxy.
	HTTPClient HTTPClient `yaml:"http_client"`
	// ResendInterval is how often a firing incident is sent again; its
	// endsAt is 4 resend intervals ahead.
	ResendInterval time.Duration `yaml:"resend_interval"`
	// ExternalLabels are added to every alert (e.g. cluster: us-east-1),
	// as Prometheus' global external_labels are: they tell apart
	// watchdogs of several clusters in one Alertmanager. A label the
	// alert already has wins, as in Prometheus.
	ExternalLabels map[string]string `yaml:"external_labels"`
	// AlertnamePrefix turns alertname from the bare class (preempt_storm)
	// into the prefix and the class in CamelCase (SGLang: SGLangPreemptStorm),
	// so it does not collide with other teams' rules. The class label
	// keeps the bare class either way.
	AlertnamePrefix string `yaml:"alertname_prefix"`
}

// DefaultConfig has no Alertmanager and Prometheus's HTTP client defaults.
func DefaultConfig() Config {
	return Config{HTTPClient: HTTPClient{commoncfg.DefaultHTTPClientConfig}, ResendInterval: DefaultResendInterval, ExternalLabels: map[string]string{}}
}

// HTTPClient is Prometheus's HTTP client configuration. It decodes without
// the validation commoncfg.HTTPClientConfig runs while decoding, which
// would abort the whole file at the first problem and without its path;
// Config.Validate reports it with the others, under http_client.
type HTTPClient struct {
	commoncfg.HTTPClientConfig `yaml:",inline"`
}

// UnmarshalYAML decodes over Prometheus's defaults (follow redirects,
// HTTP/2), as commoncfg.HTTPClientConfig does.
func (c *HTTPClient) UnmarshalYAML(unmarshal func(any) error) error {
	type plain commoncfg.HTTPClientConfig
	p := plain(commoncfg.DefaultHTTPClientConfig)
	if err := unmarshal(&p); err != nil {
		return err
	}
	c.HTTPClientConfig = commoncfg.HTTPClientConfig(p)
	return nil
}

// Enabled reports whether an Alertmanager is configured.
func (c Config) Enabled() bool { return len(c.URLs) > 0 }

// Validate reports every problem with YAML paths relative to the
// integration's section ("urls[1]: ...").
func (c Config) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, raw := range c.URLs {
		if _, err := alertsURL(raw); err != nil {
			errs = append(errs, fmt.Errorf("urls[%d]: %w", i, err))
			continue
		}
		if seen[raw] {
			errs = append(errs, fmt.Errorf("urls[%d]: %s is listed twice", i, raw))
		}
		seen[raw] = true
	}
	if c.ResendInterval <= 0 {
		errs = append(errs, fmt.Errorf("resend_interval: must be positive, got %s", c.ResendInterval))
	}
	for _, k := range slices.Sorted(maps.Keys(c.ExternalLabels)) {
		switch {
		case !model.LabelName(k).IsValidLegacy() || strings.HasPrefix(k, "__"):
			errs = append(errs, fmt.Errorf("external_labels: %q is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not __*)", k))
		case c.ExternalLabels[k] == "":
			errs = append(errs, fmt.Errorf("external_labels.%s: empty value (Alertmanager drops an empty label)", k))
		}
	}
	if c.AlertnamePrefix != "" && !model.LabelName(c.AlertnamePrefix).IsValidLegacy() {
		errs = append(errs, fmt.Errorf("alertname_prefix: %q: letters, digits and _, not starting with a digit", c.AlertnamePrefix))
	}
	if err := c.HTTPClient.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("http_client: %w", err))
	}
	return errors.Join(errs...)
}

// alertsURL is the API endpoint of one configured Alertmanager URL.
// Credentials belong in http_client, where they are kept out of logs.
func alertsURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("want an http(s) URL such as http://alertmanager:9093")
	}
	if u.User != nil {
		return "", errors.New("must not hold credentials; use http_client.basic_auth")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("must not have a query or fragment")
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), AlertsPath) + AlertsPath
	return u.String(), nil
}

// Notifier posts events to the Alertmanagers of one cluster.
type Notifier struct {
	endpoints []string
	client    *http.Client
	resend    time.Duration
	external  map[string]string
	prefix    string
	log       *zap.Logger
	now       func() time.Time
}

// New builds the notifier and its HTTP client from cfg.HTTPClient; opts
// are the client's process-level options (a test's in-memory network).
func New(cfg Config, logger *zap.Logger, opts ...commoncfg.HTTPClientOption) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("urls: at least one Alertmanager URL is required")
	}
	client, err := commoncfg.NewClientFromConfig(cfg.HTTPClient.HTTPClientConfig, Name, opts...)
	if err != nil {
		return nil, fmt.Errorf("http_client: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	n := &Notifier{client: client, resend: cfg.ResendInterval, external: maps.Clone(cfg.ExternalLabels), prefix: cfg.AlertnamePrefix, log: logger, now: time.Now}
	for _, raw := range cfg.URLs {
		u, _ := alertsURL(raw)
		n.endpoints = append(n.endpoints, u)
	}
	return n, nil
}

// RefreshInterval implements notify.Refresher: the queue re-sends every open
// incident this often, so Alertmanager keeps it firing.
func (n *Notifier) RefreshInterval() time.Duration { return n.resend }

// Notify implements notify.Notifier (without incident context).
func (n *Notifier) Notify(ctx context.Context, ev notify.Event) error {
	return n.NotifyIncident(ctx, ev, nil)
}

// NotifyIncident implements notify.IncidentNotifier.
//
// Alertmanager knows an alert by its label set, and groups, silences and
// inhibits by it, so the label set of an incident's alert never changes
// while the incident is open. Its labels are the incident's as it first
// reached Alertmanager (class, replica, model, fleet, target labels),
// kept in the incident record; what changes (the class a symptom is
// re-titled to, the severity, the headline, the consequences, the
// evidence) is in the annotations. The severity label is the one
// deliberate exception: an incident that escalates gets a second alert,
// the same labels with the higher severity, beside the first, as a
// Prometheus rule with a warning and a critical alert does; an inhibit
// rule (docs/configuration.md) mutes the lower one. Nothing is resolved
// until the incident resolves, which ends every alert it has. Alerts of
// an earlier incident of the fingerprint still open here (its resolve was
// lost) are ended in the same request.
func (n *Notifier) NotifyIncident(ctx context.Context, ev notify.Event, inc *notify.Incident) error {
	now := n.now()
	st := n.loadState(ev, inc)
	if !slices.Contains(st.Severities, ev.Severity) {
		st.Severities = append(st.Severities, ev.Severity)
		slices.Sort(st.Severities)
	}
	annotations := Annotations(ev)
	annotations["current_severity"] = ev.Severity.String()
	annotations["current_class"] = ev.Class
	resolved := notify.Resolved(ev)
	startsAt, endsAt := ev.StartsAt, now.Add(endsAtResends*n.resend)
	if resolved {
		endsAt = ev.EndsAt
		if endsAt.IsZero() {
			endsAt = now
		}
	}
	if startsAt.IsZero() || startsAt.After(endsAt) {
		startsAt = ev.At
	}
	var batch []postableAlert
	var current []map[string]string
	for _, sev := range st.Severities {
		labels := n.labels(st.Identity.event(sev))
		current = append(current, labels)
		batch = append(batch, postableAlert{Labels: labels, Annotations: annotations, StartsAt: startsAt, EndsAt: endsAt, GeneratorURL: ev.AlertURL})
	}
	for _, old := range st.stale {
		if !slices.ContainsFunc(current, func(l map[string]string) bool { return maps.Equal(l, old) }) {
			stale := postableAlert{Labels: old, Annotations: annotations, StartsAt: startsAt, EndsAt: now, GeneratorURL: ev.AlertURL}
			if resolved {
				stale.EndsAt = endsAt
			}
			batch = append(batch, stale)
		}
	}
	if err := n.post(ctx, batch); err != nil {
		return err
	}
	if inc != nil {
		st.Incident, st.Alerts = ev.Incident, current
		if b, err := json.Marshal(st); err == nil {
			if inc.Ref == nil {
				inc.Ref = map[string]string{}
			}
			inc.Ref[refState] = string(b)
			delete(inc.Ref, refLabels)
		}
	}
	return nil
}

// refState is the key under which the incident record keeps what
// Alertmanager was sent (alertState).
const refState = "alertmanager"

// alertState is what the incident record keeps: the incident the alerts
// belong to, its identity as it first reached Alertmanager, the
// severities it has alerts for, and their label sets.
type alertState struct {
	Incident   string              `json:"incident,omitempty"`
	Identity   identity            `json:"identity"`
	Severities []detect.Severity   `json:"severities"`
	Alerts     []map[string]string `json:"alerts"`
	// stale are label sets sent before that are not this incident's
	// alerts (an earlier incident's, or the format before this one): ended
	// unless they are among the current ones.
	stale []map[string]string
}

// identity is what an incident's labels are made of, fixed when it first
// reaches Alertmanager.
type identity struct {
	Class       string            `json:"class"`
	Replica     string            `json:"replica"`
	Model       string            `json:"model,omitempty"`
	Fleet       bool              `json:"fleet,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Integration string            `json:"integration,omitempty"`
}

func identityOf(ev notify.Event) identity {
	return identity{Class: ev.Class, Replica: ev.Replica, Model: ev.Model, Fleet: ev.Fleet, Labels: ev.Labels, Integration: ev.Integration}
}

// event is an event with the identity's label-forming fields and sev.
func (id identity) event(sev detect.Severity) notify.Event {
	return notify.Event{Class: id.Class, Replica: id.Replica, Model: id.Model, Fleet: id.Fleet, Labels: id.Labels, Integration: id.Integration, Severity: sev}
}

// loadState is the alert state ev continues: the stored one when it is
// ev's incident's (the same incident ID; without IDs, an open record),
// else a new one from ev, with any alerts still open from before as stale.
func (n *Notifier) loadState(ev notify.Event, inc *notify.Incident) alertState {
	fresh := alertState{Identity: identityOf(ev)}
	if inc == nil {
		return fresh
	}
	if raw := inc.Ref[refLabels]; raw != "" && inc.Open {
		var old map[string]string
		if err := json.Unmarshal([]byte(raw), &old); err == nil {
			fresh.stale = append(fresh.stale, old)
		}
	}
	raw := inc.Ref[refState]
	if raw == "" {
		return fresh
	}
	var st alertState
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		n.log.Warn("stored Alertmanager alert state unreadable; starting the incident's alerts afresh", zap.String("fingerprint", ev.Fingerprint), zap.Error(err))
		return fresh
	}
	same := (ev.Incident != "" && st.Incident == ev.Incident) || (ev.Incident == "" && inc.Open)
	if same {
		st.stale = append(fresh.stale, st.Alerts...)
		return st
	}
	if inc.Open {
		fresh.stale = append(fresh.stale, st.Alerts...)
	}
	return fresh
}

// postableAlert is Alertmanager's API v2 PostableAlert. The generated
// OpenAPI models (api/v2/models) would pull go-openapi's validate, strfmt,
// spec and loads into the daemon for five fields; Alertmanager itself
// validates what we post and answers 400, which is classified permanent.
type postableAlert struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt,omitzero"`
	EndsAt       time.Time         `json:"endsAt,omitzero"`
	GeneratorURL string            `json:"generatorURL,omitempty"`
}

// labels is the alert's label set: the event's labels (notify.EventLabels:
// class, severity, replica, model, fleet and the target's labels from
// discovery, such as namespace and team), alertname, on a delivery-failure
// notice the integration that failed, and the external labels the alert
// does not have.
func (n *Notifier) labels(ev notify.Event) map[string]string {
	out := notify.EventLabels(ev)
	out["alertname"] = Alertname(n.prefix, ev.Class)
	if ev.Integration != "" {
		out["integration"] = ev.Integration
	}
	for k, v := range n.external {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// Alertname is class with no prefix, else the prefix and the class in
// CamelCase: ("SGLang", "preempt_storm") is SGLangPreemptStorm.
func Alertname(prefix, class string) string {
	if prefix == "" {
		return class
	}
	var b strings.Builder
	b.WriteString(prefix)
	for word := range strings.SplitSeq(class, "_") {
		if word != "" {
			b.WriteString(strings.ToUpper(word[:1]) + word[1:])
		}
	}
	return b.String()
}

// Annotations are the page's texts: summary (the title), diagnosis,
// triage, evidence, the emergency and root-cause steps (one per line), the
// runbook and the incident's URL.
func Annotations(ev notify.Event) map[string]string {
	out := map[string]string{}
	set := func(k, v string) {
		v = strings.TrimSpace(v)
		if v == "" {
			return
		}
		if r := []rune(v); len(r) > maxAnnotationRune {
			v = string(r[:maxAnnotationRune]) + "…(truncated)"
		}
		out[k] = v
	}
	set("summary", notify.Title(ev))
	set("description", ev.Summary)
	set("diagnosis", ev.Diagnosis)
	set("triage", notify.Triage(ev))
	var evidence []string
	for _, f := range notify.Shown(ev.Evidence) {
		evidence = append(evidence, notify.FormatField(f))
	}
	set("evidence", strings.Join(evidence, "\n"))
	set("emergency_steps", numbered(ev.Emergency))
	set("root_cause_steps", numbered(ev.RootCause))
	set("runbook_url", ev.RunbookURL)
	set("incident_url", ev.AlertURL)
	set("postmortem_url", ev.PostmortemURL)
	return out
}

func numbered(steps []string) string {
	lines := make([]string, 0, len(steps))
	for i, s := range steps {
		lines = append(lines, strconv.Itoa(i+1)+". "+s)
	}
	return strings.Join(lines, "\n")
}

// post sends batch to every endpoint at once. One acceptance is a delivery:
// the cluster's members share alerts among themselves. When all fail, the
// error is classified as retryable if any endpoint's failure is (a member
// may come back), permanent only when every one rejected the request.
func (n *Notifier) post(ctx context.Context, batch []postableAlert) error {
	body, err := json.Marshal(batch)
	if err != nil {
		return notify.Permanent(notify.WithReason(fmt.Errorf("alertmanager: encode alerts: %w", err), notify.ReasonInvalidPayload))
	}
	errs := make([]error, len(n.endpoints))
	var wg sync.WaitGroup
	for i, endpoint := range n.endpoints {
		wg.Go(func() { errs[i] = n.postOne(ctx, endpoint, body) })
	}
	wg.Wait()
	if slices.Contains(errs, nil) {
		for i, err := range errs {
			if err != nil {
				n.log.Warn("an Alertmanager of the cluster did not accept the alerts; another did",
					zap.String("url", n.endpoints[i]), zap.Error(err))
			}
		}
		return nil
	}
	primary := errs[0]
	for _, err := range errs {
		if !notify.IsPermanent(err) {
			primary = err
			break
		}
	}
	if len(errs) == 1 {
		return primary
	}
	return &clusterError{primary: primary, all: errs}
}

// clusterError reports every endpoint's failure but is classified (reason,
// permanence, Retry-After) by one of them only: joining them would make
// the whole look permanent when one member rejected and another is down.
type clusterError struct {
	primary error
	all     []error
}

func (e *clusterError) Error() string {
	msgs := make([]string, len(e.all))
	for i, err := range e.all {
		msgs[i] = err.Error()
	}
	return "every Alertmanager failed: " + strings.Join(msgs, "; ")
}

func (e *clusterError) Unwrap() error { return e.primary }

func (n *Notifier) postOne(ctx context.Context, endpoint string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		return notify.Permanent(fmt.Errorf("alertmanager %s: %w", endpoint, err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		// The endpoint holds no credential (Validate refuses userinfo and
		// queries); any other URL the error quotes is reduced all the same.
		return fmt.Errorf("alertmanager %s: %w", endpoint, redact.Secrets{}.Error(err))
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	return notify.ForStatus(fmt.Errorf("alertmanager %s: HTTP %d: %s", endpoint, resp.StatusCode, strings.TrimSpace(string(msg))), resp.StatusCode, resp.Header)
}
