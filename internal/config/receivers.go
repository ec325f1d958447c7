package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/alertmanager"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/pagerduty"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/slack"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify/webhook"
)

// Receiver is one named destination of notify.receivers, for routes to
// choose by name: one Slack channel, one PagerDuty service, one
// Alertmanager cluster or one webhook. Exactly one kind is set. Each
// receiver has its own outbox, records and worker, so one that fails
// delays no other.
type Receiver struct {
	Name         string                `yaml:"name"`
	Slack        *SlackReceiver        `yaml:"slack"`
	PagerDuty    *PagerDutyReceiver    `yaml:"pagerduty"`
	Alertmanager *AlertmanagerReceiver `yaml:"alertmanager"`
	Webhook      *WebhookReceiver      `yaml:"webhook"`
}

// SlackReceiver is a Slack receiver: the keys of notify.slack.
type SlackReceiver Slack

// UnmarshalYAML decodes over the defaults (api_url). The unmarshal
// function form keeps the decoder strict about unknown keys.
func (s *SlackReceiver) UnmarshalYAML(unmarshal func(any) error) error {
	v := Slack{APIURL: DefaultSlackAPIURL}
	if err := unmarshal(&v); err != nil {
		return err
	}
	*s = SlackReceiver(v)
	return nil
}

// PagerDutyReceiver is a PagerDuty receiver: the keys of notify.pagerduty.
type PagerDutyReceiver PagerDuty

// UnmarshalYAML decodes over the defaults (events_url).
func (p *PagerDutyReceiver) UnmarshalYAML(unmarshal func(any) error) error {
	v := PagerDuty{EventsURL: DefaultPagerDutyURL}
	if err := unmarshal(&v); err != nil {
		return err
	}
	*p = PagerDutyReceiver(v)
	return nil
}

// AlertmanagerReceiver is an Alertmanager receiver: the keys of
// notify.alertmanager.
type AlertmanagerReceiver alertmanager.Config

// UnmarshalYAML decodes over the defaults (resend interval, HTTP client).
func (a *AlertmanagerReceiver) UnmarshalYAML(unmarshal func(any) error) error {
	v := alertmanager.DefaultConfig()
	if err := unmarshal(&v); err != nil {
		return err
	}
	*a = AlertmanagerReceiver(v)
	return nil
}

// WebhookReceiver is a webhook receiver (docs/webhook.md). The URL and the
// signing secret are secrets, given inline or, better, as files.
type WebhookReceiver struct {
	URL        notify.Secret `yaml:"url"`
	URLFile    string        `yaml:"url_file"`
	Secret     notify.Secret `yaml:"secret"`
	SecretFile string        `yaml:"secret_file"`
}

// Receiver kinds, the keys of a notify.receivers entry.
const (
	KindSlack        = "slack"
	KindPagerDuty    = "pagerduty"
	KindAlertmanager = "alertmanager"
	KindWebhook      = "webhook"
)

// Kinds are the kinds r sets (one in a valid receiver).
func (r Receiver) Kinds() []string {
	var out []string
	for _, k := range []struct {
		name string
		set  bool
	}{{KindSlack, r.Slack != nil}, {KindPagerDuty, r.PagerDuty != nil}, {KindAlertmanager, r.Alertmanager != nil}, {KindWebhook, r.Webhook != nil}} {
		if k.set {
			out = append(out, k.name)
		}
	}
	return out
}

// SlackConfig is the notifier configuration of a Slack receiver.
func (s SlackReceiver) SlackConfig() slack.Config {
	return slack.Config{BotToken: s.BotToken, Channel: s.Channel, APIURL: s.APIURL, WebhookURL: s.WebhookURL}
}

// PagerDutyConfig is the notifier configuration of a PagerDuty receiver.
func (p PagerDutyReceiver) PagerDutyConfig() pagerduty.Config {
	return pagerduty.Config{RoutingKey: p.RoutingKey, EventsURL: p.EventsURL}
}

// WebhookConfig is the notifier configuration of a webhook receiver.
func (w WebhookReceiver) WebhookConfig() webhook.Config {
	return webhook.Config{URL: w.URL, Secret: w.Secret}
}

// defaultReceivers are the names of the single-integration sections
// (notify.slack, notify.pagerduty, notify.alertmanager) and the log: routes
// may always name them, a named receiver may not take them.
var defaultReceivers = []string{notify.IntegrationLog, notify.IntegrationSlack, notify.IntegrationPagerDuty, alertmanager.Name}

// receiverSecret is one secret of a receiver and the file it may come from.
type receiverSecret struct {
	key  string // YAML key of the inline value; the file's is key+"_file"
	dst  *notify.Secret
	file string
}

func (r *Receiver) secrets() []receiverSecret {
	var out []receiverSecret
	if s := r.Slack; s != nil {
		out = append(out, receiverSecret{"slack.bot_token", &s.BotToken, s.BotTokenFile},
			receiverSecret{"slack.webhook_url", &s.WebhookURL, s.WebhookURLFile})
	}
	if p := r.PagerDuty; p != nil {
		out = append(out, receiverSecret{"pagerduty.routing_key", &p.RoutingKey, p.RoutingKeyFile})
	}
	if w := r.Webhook; w != nil {
		out = append(out, receiverSecret{"webhook.url", &w.URL, w.URLFile}, receiverSecret{"webhook.secret", &w.Secret, w.SecretFile})
	}
	return out
}

// readReceiverSecrets reads the secret files of the named receivers.
// Unlike the single-integration sections', a file that does not exist is
// an error: a receiver is named in routes, so one left without its
// credential would drop the pages routed to it.
func (n *Notify) readReceiverSecrets() error {
	var errs []error
	for i := range n.Receivers {
		for _, s := range n.Receivers[i].secrets() {
			if s.file == "" {
				continue
			}
			path := fmt.Sprintf("notify.receivers[%d].%s_file", i, s.key)
			if s.dst.IsSet() {
				errs = append(errs, fmt.Errorf("%s: %s is set as well; set one", path, strings.TrimSuffix(path, "_file")))
				continue
			}
			b, err := os.ReadFile(s.file)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				errs = append(errs, fmt.Errorf("%s: %s does not exist", path, s.file))
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", path, err))
			default:
				*s.dst = notify.Secret(strings.TrimSpace(string(b)))
				if !s.dst.IsSet() {
					errs = append(errs, fmt.Errorf("%s: %s is empty", path, s.file))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// validateReceivers reports every problem of notify.receivers, each with
// its YAML path. It never prints a secret.
func (n Notify) validateReceivers() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	// prefixed adds every error of a kind's own Validate under path.
	prefixed := func(path string, err error) {
		for _, e := range unwrapAll(err) {
			if e != nil {
				add("%s.%w", path, e)
			}
		}
	}
	seen := map[string]int{}
	for i, r := range n.Receivers {
		p := fmt.Sprintf("notify.receivers[%d]", i)
		switch {
		case r.Name == "":
			add("%s.name: required", p)
		case !notify.ValidName(r.Name):
			add("%s.name: %q: lower-case letters, digits, _ and -, starting with a letter", p, r.Name)
		case slices.Contains(defaultReceivers, r.Name):
			add("%s.name: %q is the receiver of notify.%s; pick another name", p, r.Name, r.Name)
		default:
			if j, dup := seen[r.Name]; dup {
				add("%s.name: %q duplicates notify.receivers[%d]", p, r.Name, j)
			}
			seen[r.Name] = i
		}
		switch kinds := r.Kinds(); len(kinds) {
		case 0:
			add("%s: no destination; set one of slack, pagerduty, alertmanager, webhook", p)
			continue
		case 1:
		default:
			add("%s: sets %s; a receiver is one destination, make one receiver each", p, strings.Join(kinds, " and "))
			continue
		}
		switch {
		case r.Slack != nil:
			c := r.Slack.SlackConfig()
			if !c.Enabled() && r.Slack.BotTokenFile == "" && r.Slack.WebhookURLFile == "" {
				add("%s.slack: no credential: set bot_token_file (with channel) or webhook_url_file", p)
			}
			if err := c.Validate(); err != nil {
				prefixed(p+".slack", err)
			}
		case r.PagerDuty != nil:
			c := r.PagerDuty.PagerDutyConfig()
			if !c.Enabled() && r.PagerDuty.RoutingKeyFile == "" {
				add("%s.pagerduty: no routing key: set routing_key_file", p)
			}
			if err := c.Validate(); err != nil {
				prefixed(p+".pagerduty", err)
			}
		case r.Alertmanager != nil:
			c := alertmanager.Config(*r.Alertmanager)
			if !c.Enabled() {
				add("%s.alertmanager.urls: at least one Alertmanager URL is required", p)
			}
			if err := c.Validate(); err != nil {
				prefixed(p+".alertmanager", err)
			}
		case r.Webhook != nil:
			if err := r.Webhook.WebhookConfig().Validate(); err != nil {
				prefixed(p+".webhook", err)
			}
		}
	}
	return errors.Join(errs...)
}

// checkRouteReceivers reports every receiver name the routes use that
// neither notify.receivers nor the default sections configure, with its
// YAML path. Load checks it; Validate does not, since a program that
// builds its configuration may add integrations of its own to the
// dispatcher (the demo's dry runs, a test's recorder).
func (n Notify) checkRouteReceivers() error {
	known := func(name string) bool {
		return slices.Contains(defaultReceivers, name) || slices.ContainsFunc(n.Receivers, func(r Receiver) bool { return r.Name == name })
	}
	err := (notify.RouteConfig{Routes: n.Routes}).CheckReceivers(known)
	var errs []error
	for _, e := range unwrapAll(err) {
		if e != nil {
			errs = append(errs, fmt.Errorf("notify.%w", e))
		}
	}
	return errors.Join(errs...)
}
