package app

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/discovery"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/runbook"
	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

func scrapeTargets(ts []config.Target) ([]scrape.Target, error) {
	out := make([]scrape.Target, 0, len(ts))
	for _, t := range ts {
		u, err := config.MetricsURL(t.URL)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", t.Name, err)
		}
		kind := t.Kind
		if kind == "" {
			kind = "engine"
		}
		out = append(out, scrape.Target{Name: t.Name, URL: u, Kind: kind, Labels: t.Labels, HTTPClient: t.HTTPClient})
	}
	return out, nil
}

// pipeline holds the running components a reload reconfigures.
type pipeline struct {
	dispatcher *notify.Dispatcher
	discovered bool // a discoverer owns the target list
	scraper    *scrape.Manager
	loop       *eval.Loop
	book       *runbook.Book
	slos       *slo.Book
	logger     *zap.Logger

	listen string // the bound listen address, a source of page links
	pages  bool   // Slack or PagerDuty is configured
	// linkWarning is the page-link notice for /readyz ("" for none).
	linkWarning atomic.Pointer[string]
}

// apply makes the running pipeline use next. Everything is validated
// before anything changes, so a rejected configuration leaves the daemon as
// it was. Targets, detector thresholds (and the runbooks that state them),
// correlation, alert timing and runbook links change live, keeping windows and alert state; settings
// bound at start-up are reported as needing a restart.
func (p *pipeline) apply(old, next config.Config) error {
	targets, err := scrapeTargets(next.Targets)
	if err != nil {
		return err
	}
	detectors, err := detect.New(next.Detectors)
	if err != nil {
		return err
	}
	// Rendered now, served with the detectors they describe.
	runbooks, err := p.book.Prepare(next.Detectors)
	if err != nil {
		return fmt.Errorf("runbooks: %w", err)
	}
	routes := notify.RouteConfig{Routes: next.Notify.Routes}
	if err := routes.Validate(); err != nil {
		return err
	}
	if p.discovered {
		// The discoverer owns the target list (static targets included).
		if !reflect.DeepEqual(old.Targets, next.Targets) || !reflect.DeepEqual(old.Discovery, next.Discovery) {
			p.logger.Warn("with discovery on, target and discovery changes take effect after a restart")
		}
	} else {
		if err := p.scraper.SetTargets(targets); err != nil {
			return fmt.Errorf("targets: %w", err)
		}
		// old was running, so its targets convert without error.
		prev, _ := scrapeTargets(old.Targets)
		p.retire(discovery.Removed(prev, targets), time.Now())
	}
	if p.slos != nil {
		p.slos.Configure(next.SLOs)
	}
	p.loop.Reconfigure(assess.New(detectors, assess.Config{Triage: next.Detectors.Triage, Correlation: next.Correlation, SLOs: p.slos}), next.Alerts, p.links(next, p.logger))
	p.book.Publish(runbooks)
	p.dispatcher.SetRoutes(routes) // validated above

	if restart := restartOnly(old, next); len(restart) > 0 {
		p.logger.Warn("some changed settings take effect only after a restart", zap.Strings("settings", restart))
	}
	return nil
}

// links are the URLs pages carry: external_url, or an address of this
// daemon derived from where it listens (config.PageLinkBase). When Slack or
// PagerDuty would send links nobody configured, it is said loudly (logged
// when it starts or changes, and in /readyz).
func (p *pipeline) links(cfg config.Config, logger *zap.Logger) alert.Links {
	base := cfg.PageLinkBase(p.listen, os.Hostname)
	warning := ""
	if p.pages {
		warning = base.Warning()
	}
	if old := p.linkWarning.Swap(&warning); warning != "" && (old == nil || *old != warning) {
		logger.Warn(warning, zap.String("links_base", base.URL), zap.String("derived_from", string(base.Source)))
	}
	return alert.Links{ExternalURL: base.URL, Runbooks: cfg.Runbooks}
}

// notices are the operator warnings /readyz shows.
func (p *pipeline) notices() []string {
	if w := p.linkWarning.Load(); w != nil && *w != "" {
		return []string{*w}
	}
	return nil
}

// retire resolves the alerts of targets that are gone ("target removed"):
// a scale-down is not an outage, and an open page for a replica that no
// longer exists would never resolve.
func (p *pipeline) retire(names []string, now time.Time) {
	if len(names) == 0 {
		return
	}
	removed := map[string]bool{}
	for _, n := range names {
		removed[n] = true
	}
	p.loop.Retire(func(replica string) bool {
		target, _, _ := strings.Cut(replica, "/")
		return removed[target] || removed[replica]
	}, "target removed", now)
}

// restartOnly lists the changed settings that are bound at start-up.
func restartOnly(old, next config.Config) []string {
	var out []string
	check := func(name string, changed bool) {
		if changed {
			out = append(out, name)
		}
	}
	check("listen_address", old.ListenAddress != next.ListenAddress)
	check("route_prefix", old.Prefixes() != next.Prefixes())
	check("state_dir", old.StateDir != next.StateDir)
	check("log_level", old.LogLevel != next.LogLevel)
	check("log_format", old.LogFormat != next.LogFormat)
	check("scrape", !reflect.DeepEqual(old.Scrape, next.Scrape))
	check("evaluation", old.Evaluation != next.Evaluation)
	check("ha", old.HA != next.HA)
	check("heartbeat", old.Heartbeat != next.Heartbeat)
	check("notify", !notifyEqual(old.Notify, next.Notify))
	check("source", old.Source != next.Source)
	check("history", !reflect.DeepEqual(old.History, next.History))
	check("incidents", old.Incidents != next.Incidents)
	check("api", old.API.TokenFile != next.API.TokenFile || old.API.Token != next.API.Token)
	return out
}

func notifyEqual(a, b config.Notify) bool {
	return a.Slack == b.Slack && a.PagerDuty == b.PagerDuty && reflect.DeepEqual(a.Alertmanager, b.Alertmanager) &&
		reflect.DeepEqual(a.Receivers, b.Receivers) &&
		a.QueueOptions() == b.QueueOptions() // routes reload live
}
