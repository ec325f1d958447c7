package notify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/redact"
)

func TestErrorClassification(t *testing.T) {
	base := errors.New("boom")
	if notify.Permanent(nil) != nil || notify.RetryAfter(nil, time.Second) != nil || notify.WithReason(nil, notify.ReasonNetwork) != nil {
		t.Error("nil must stay nil")
	}
	p := fmt.Errorf("wrapped: %w", notify.WithReason(notify.Permanent(base), notify.ReasonAuthError))
	if !notify.IsPermanent(p) || notify.ReasonOf(p) != notify.ReasonAuthError || !errors.Is(p, base) {
		t.Errorf("permanent: %v %v", notify.IsPermanent(p), notify.ReasonOf(p))
	}
	ra := fmt.Errorf("x: %w", notify.RetryAfter(base, 42*time.Second))
	if d, ok := notify.RetryAfterOf(ra); !ok || d != 42*time.Second || notify.ReasonOf(ra) != notify.ReasonRateLimited || notify.IsPermanent(ra) {
		t.Errorf("retry after: %v %v", d, ok)
	}
	if notify.ReasonOf(context.DeadlineExceeded) != notify.ReasonTimeout {
		t.Error("deadline is a timeout")
	}
	// A transport error with its credential taken out still classifies.
	hook := redact.Secrets{Values: []string{"https://hooks.slack.com/services/T/B/SECRET", "https://x/SECRET"}}
	ue := &url.Error{Op: "Post", URL: "https://hooks.slack.com/services/T/B/SECRET", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	red := hook.Error(fmt.Errorf("post: %w", ue))
	if strings.Contains(red.Error(), "SECRET") || notify.ReasonOf(red) != notify.ReasonNetwork {
		t.Errorf("redacted %q reason %s", red, notify.ReasonOf(red))
	}
	to := hook.Error(&url.Error{Op: "Post", URL: "https://x/SECRET", Err: context.DeadlineExceeded})
	if notify.ReasonOf(to) != notify.ReasonTimeout || strings.Contains(to.Error(), "SECRET") {
		t.Errorf("timeout redacted %q reason %s", to, notify.ReasonOf(to))
	}
	for code, want := range map[int]notify.Reason{400: notify.ReasonInvalidPayload, 401: notify.ReasonAuthError, 403: notify.ReasonAuthError,
		404: notify.ReasonClientError, 429: notify.ReasonRateLimited, 500: notify.ReasonServerError, 503: notify.ReasonServerError} {
		if got := notify.ReasonForStatus(code); got != want {
			t.Errorf("%d → %s, want %s", code, got, want)
		}
	}
}

func TestSecretNeverPrints(t *testing.T) {
	const value = "xoxb-very-secret"
	s := notify.Secret(value)
	type cfg struct {
		Token notify.Secret `json:"token" yaml:"token"`
	}
	c := cfg{Token: s}
	j, _ := json.Marshal(c)
	y, _ := yaml.Marshal(c)
	var slogBuf bytes.Buffer
	slog.New(slog.NewTextHandler(&slogBuf, nil)).Info("x", "token", s)
	core, logs := observer.New(zapcore.InfoLevel)
	zap.New(core).Info("x", zap.Any("token", s), zap.Stringer("t2", s))
	outs := []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q", c, c, c, s, s), string(j), string(y), slogBuf.String(), fmt.Sprint(logs.All()[0].ContextMap())}
	for _, o := range outs {
		if strings.Contains(o, value) {
			t.Errorf("secret printed: %s", o)
		}
		if !strings.Contains(o, "secret>") && !strings.Contains(o, `secret\u003e`) {
			t.Errorf("no <secret> marker in %s", o)
		}
	}
	var back cfg
	if err := yaml.Unmarshal([]byte("token: "+value), &back); err != nil || string(back.Token) != value {
		t.Errorf("yaml decode: %v %q", err, string(back.Token))
	}
}
