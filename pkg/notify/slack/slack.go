// Package slack delivers watchdog events to Slack with slack-go. With a bot
// token it posts one parent message per incident (chat.postMessage), updates
// it on every state change (chat.update with the channel ID and ts Slack
// returned) and records what changed in its thread. With only an incoming
// webhook it degrades to one post per state change. One call is one
// attempt; failures are classified for the shared queue in pkg/notify.
package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	slackapi "github.com/slack-go/slack"
	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/httpclient"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

// DefaultAPIURL is Slack's public Web API base.
const DefaultAPIURL = "https://slack.com/api"

// Config configures the integration. Environment: SLACK_BOT_TOKEN (also
// SLACK_BOT_TOKEN_FILE), SLACK_CHANNEL, SLACK_API_URL, SLACK_WEBHOOK_URL
// (also SLACK_WEBHOOK_URL_FILE). A bot token wins over a webhook.
type Config struct {
	BotToken   notify.Secret `yaml:"bot_token"`
	Channel    string        `yaml:"channel"` // channel ID or name; Slack answers with the ID, which is what is stored
	APIURL     string        `yaml:"api_url"`
	WebhookURL notify.Secret `yaml:"webhook_url"`
}

// Enabled reports whether a bot token or a webhook URL is configured.
func (c Config) Enabled() bool { return c.BotToken.IsSet() || c.WebhookURL.IsSet() }

// Validate reports every problem with YAML-relative paths. It never prints
// the token or the webhook URL.
func (c Config) Validate() error {
	var errs []error
	if c.BotToken.IsSet() && c.Channel == "" {
		errs = append(errs, errors.New("channel: required with bot_token"))
	}
	if !c.BotToken.IsSet() && !c.WebhookURL.IsSet() && c.Channel != "" {
		errs = append(errs, errors.New("bot_token: required when channel is set (or configure webhook_url)"))
	}
	if c.BotToken.IsSet() && strings.TrimSpace(string(c.BotToken)) != string(c.BotToken) {
		errs = append(errs, errors.New("bot_token: has leading or trailing white space"))
	}
	if c.APIURL != "" {
		if u, err := url.Parse(c.APIURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, errors.New("api_url: want an http(s) URL such as "+DefaultAPIURL))
		}
	}
	if c.WebhookURL.IsSet() {
		// The message must not quote the URL: it is a credential.
		if u, err := url.Parse(string(c.WebhookURL)); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, errors.New("webhook_url: not an http(s) URL"))
		}
	}
	return errors.Join(errs...)
}

// Notifier sends events to Slack.
type Notifier struct {
	api        *slackapi.Client // nil in webhook mode
	channel    string
	webhookURL string
	http       *http.Client
	secrets    redact.Secrets
	log        *zap.Logger
}

// New builds the notifier. httpClient nil gets a client with a 15 s timeout.
func New(cfg Config, httpClient *http.Client, logger *zap.Logger) (*Notifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, errors.New("bot_token or webhook_url: required")
	}
	if httpClient == nil {
		httpClient = httpclient.New(notify.IntegrationSlack, 15*time.Second)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	n := &Notifier{channel: cfg.Channel, http: httpClient, log: logger}
	for _, s := range []notify.Secret{cfg.BotToken, cfg.WebhookURL} {
		if s.IsSet() {
			n.secrets.Values = append(n.secrets.Values, string(s))
		}
	}
	if cfg.BotToken.IsSet() {
		api := cfg.APIURL
		if api == "" {
			api = DefaultAPIURL
		}
		n.api = slackapi.New(string(cfg.BotToken),
			slackapi.OptionAPIURL(strings.TrimSuffix(api, "/")+"/"),
			slackapi.OptionHTTPClient(httpClient))
	} else {
		n.webhookURL = string(cfg.WebhookURL)
	}
	return n, nil
}

// Incident reference keys in notify.Incident.Ref.
const (
	RefChannel  = "channel"   // channel ID as Slack returned it
	RefTS       = "ts"        // parent message ts, the exact string Slack returned
	RefStartsAt = "starts_at" // StartsAt of the incident episode the parent belongs to
)

// Notify implements notify.Notifier (without incident context: every event
// is a new post).
func (n *Notifier) Notify(ctx context.Context, ev notify.Event) error {
	return n.NotifyIncident(ctx, ev, nil)
}

// NotifyIncident implements notify.IncidentNotifier.
func (n *Notifier) NotifyIncident(ctx context.Context, ev notify.Event, inc *notify.Incident) error {
	var last notify.Event
	if inc != nil {
		last = inc.Last
	}
	if n.api == nil {
		return n.webhook(ctx, ev, inc, last)
	}
	if inc == nil {
		inc = &notify.Incident{}
	}
	if inc.Ref == nil {
		inc.Ref = map[string]string{}
	}
	channel, ts := inc.Ref[RefChannel], inc.Ref[RefTS]
	sameEpisode := ts != "" && inc.Ref[RefStartsAt] == ev.StartsAt.UTC().Format(time.RFC3339Nano)
	if ev.Kind == notify.KindTrigger && !sameEpisode {
		// A new incident (or a new episode after a resolve): a new parent.
		return n.postParent(ctx, ev, inc)
	}
	if ts == "" {
		// Never posted here (e.g. routed to Slack only after escalation).
		return n.postParent(ctx, ev, inc)
	}
	blocks := Blocks(ev)
	_, _, _, err := n.api.UpdateMessageContext(ctx, channel, ts,
		slackapi.MsgOptionText(FallbackText(ev), false), slackapi.MsgOptionBlocks(blocks...))
	if isGone(err) {
		n.log.Warn("slack parent message is gone; posting a new one",
			zap.String("fingerprint", ev.Fingerprint), zap.String("slack_error", errCode(err)))
		if err := n.postParent(ctx, ev, inc); err != nil {
			return err
		}
		channel, ts = inc.Ref[RefChannel], inc.Ref[RefTS]
	} else if err != nil {
		return n.classify("chat.update", err)
	}
	if ev.Kind == notify.KindTrigger {
		return nil // a re-delivered trigger: the parent now shows it, nothing changed
	}
	text := ChangeText(last, ev)
	if text == "" {
		return nil
	}
	opts := []slackapi.MsgOption{slackapi.MsgOptionText(text, false), slackapi.MsgOptionTS(ts), slackapi.MsgOptionDisableLinkUnfurl()}
	if resolved(ev) {
		opts = append(opts, slackapi.MsgOptionBroadcast())
	}
	if _, _, err := n.api.PostMessageContext(ctx, channel, opts...); err != nil {
		return n.classify("chat.postMessage (thread reply)", err)
	}
	return nil
}

func (n *Notifier) postParent(ctx context.Context, ev notify.Event, inc *notify.Incident) error {
	channel, ts, err := n.api.PostMessageContext(ctx, n.channel,
		slackapi.MsgOptionText(FallbackText(ev), false),
		slackapi.MsgOptionBlocks(Blocks(ev)...),
		slackapi.MsgOptionDisableLinkUnfurl())
	if err != nil {
		return n.classify("chat.postMessage", err)
	}
	inc.Ref[RefChannel] = channel
	inc.Ref[RefTS] = ts
	inc.Ref[RefStartsAt] = ev.StartsAt.UTC().Format(time.RFC3339Nano)
	return nil
}

// webhook posts one message per state change; nothing can be updated.
func (n *Notifier) webhook(ctx context.Context, ev notify.Event, inc *notify.Incident, last notify.Event) error {
	if ev.Kind == notify.KindUpdate && inc != nil && inc.Open && ChangeText(last, ev) == "" {
		return notify.ErrNothingToSend
	}
	blocks := Blocks(ev)
	if ev.Kind == notify.KindUpdate || ev.Kind == notify.KindRepeat {
		if change := ChangeText(last, ev); change != "" {
			blocks = append([]slackapi.Block{blocks[0], section(change)}, blocks[1:]...)
			if len(blocks) > MaxBlocks {
				blocks = blocks[:MaxBlocks]
			}
		}
	}
	msg := &slackapi.WebhookMessage{Text: FallbackText(ev), Blocks: &slackapi.Blocks{BlockSet: blocks}}
	if err := slackapi.PostWebhookCustomHTTPContext(ctx, n.webhookURL, n.http, msg); err != nil {
		return n.classify("webhook", err)
	}
	return nil
}

var goneErrors = map[string]bool{
	"message_not_found": true, "cant_update_message": true, "channel_not_found": true,
	"edit_window_closed": true, "is_archived": true,
}

func isGone(err error) bool {
	var se slackapi.SlackErrorResponse
	return errors.As(err, &se) && goneErrors[se.Err]
}

func errCode(err error) string {
	var se slackapi.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

var (
	authErrors = map[string]bool{
		"invalid_auth": true, "not_authed": true, "account_inactive": true, "token_revoked": true,
		"token_expired": true, "no_permission": true, "missing_scope": true, "not_in_channel": true,
		"ekm_access_denied": true, "team_access_not_granted": true, "access_denied": true,
		"org_login_required": true, "invalid_token": true, "not_allowed_token_type": true,
	}
	payloadErrors = map[string]bool{
		"invalid_blocks": true, "invalid_blocks_format": true, "msg_too_long": true, "msg_blocks_too_long": true,
		"no_text": true, "too_many_attachments": true, "invalid_arguments": true, "invalid_form_data": true,
		"invalid_array_arg": true, "invalid_charset": true, "invalid_json": true, "json_not_object": true,
		"invalid_payload": true, "invalid_metadata_format": true, "markdown_text_conflict": true,
	}
	serverErrors = map[string]bool{
		"internal_error": true, "fatal_error": true, "service_unavailable": true, "request_timeout": true,
	}
)

// classify turns a slack-go error into a classified error that names the
// call and never contains the token or the webhook URL.
func (n *Notifier) classify(call string, err error) error {
	var rl *slackapi.RateLimitedError
	var sc slackapi.StatusCodeError
	var se slackapi.SlackErrorResponse
	switch {
	case errors.As(err, &rl):
		return notify.RetryAfter(fmt.Errorf("slack %s: rate limited", call), rl.RetryAfter)
	case errors.As(err, &sc):
		e := fmt.Errorf("slack %s: HTTP %d", call, sc.Code)
		switch {
		case sc.Code == http.StatusTooManyRequests:
			return notify.Throttled(e) // slack-go read a Retry-After into RateLimitedError
		case sc.Code >= 500 || sc.Code == http.StatusRequestTimeout:
			return notify.WithReason(e, notify.ReasonForStatus(sc.Code))
		default:
			return notify.WithReason(notify.Permanent(e), notify.ReasonForStatus(sc.Code))
		}
	case errors.As(err, &se):
		e := fmt.Errorf("slack %s: %s", call, n.secrets.String(se.Err))
		switch {
		case se.Err == "ratelimited" || se.Err == "rate_limited":
			return notify.Throttled(e)
		case serverErrors[se.Err]:
			return notify.WithReason(e, notify.ReasonServerError)
		case authErrors[se.Err]:
			return notify.WithReason(notify.Permanent(e), notify.ReasonAuthError)
		case payloadErrors[se.Err]:
			return notify.WithReason(notify.Permanent(e), notify.ReasonInvalidPayload)
		default: // channel_not_found, is_archived, restricted_action, unknown codes
			return notify.WithReason(notify.Permanent(e), notify.ReasonClientError)
		}
	}
	red := n.secrets.Error(err)
	var ue *url.Error
	if errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		reason := notify.ReasonOf(red)
		if reason == notify.ReasonUnknown {
			reason = notify.ReasonNetwork
		}
		return notify.WithReason(fmt.Errorf("slack %s: %s", call, red), reason)
	}
	// Undecodable responses and the like: retry, but never quote a secret.
	return notify.WithReason(fmt.Errorf("slack %s: %s", call, red), notify.ReasonUnknown)
}
