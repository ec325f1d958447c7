package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Web is where and how the server answers, as Prometheus' web flags say.
type Web struct {
	// RoutePrefix mounts every endpoint under a path ("/watchdog"; "" for
	// the root; config.Prefixes.Routes). The root then redirects to it, and
	// nothing else outside it answers.
	RoutePrefix string
	// ConfigFile is a web configuration file in exporter-toolkit's format
	// (--web.config.file): TLS (tls_server_config), basic auth
	// (basic_auth_users, bcrypt hashes) and response headers
	// (http_server_config). It covers every endpoint, the probes included,
	// as in Prometheus. The toolkit reads it again on every connection and
	// request, so a changed file takes effect without a restart; a file
	// that no longer loads answers 500 (and fails TLS handshakes) until it
	// is fixed. "": plain HTTP, no authentication.
	ConfigFile string
}

// Check loads the web configuration file, its certificates and its
// password hashes, so a mistake stops the start with the file's name
// instead of failing every request.
func (w Web) Check() error {
	if err := web.Validate(w.ConfigFile); err != nil {
		return fmt.Errorf("--web.config.file %s: %w", w.ConfigFile, err)
	}
	return nil
}

// serve serves srv on ln as the web configuration file says.
func (w Web) serve(ln net.Listener, srv *http.Server, logger *zap.Logger) error {
	if logger == nil {
		logger = zap.NewNop()
	}
	file := w.ConfigFile
	return web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &file}, slog.New(zapHandler{logger.Core()}))
}

// mount serves h under the route prefix.
func (w Web) mount(h http.Handler) http.Handler {
	if w.RoutePrefix == "" {
		return h
	}
	return prefixed{prefix: w.RoutePrefix, h: http.StripPrefix(w.RoutePrefix, h)}
}

// prefixed answers under prefix only, as Prometheus with
// --web.route-prefix: the prefix itself and the root redirect to
// prefix + "/", anything else outside it is 404.
type prefixed struct {
	prefix string
	h      http.Handler
}

func (p prefixed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch path := r.URL.Path; {
	case strings.HasPrefix(path, p.prefix+"/"):
		p.h.ServeHTTP(w, r)
	case path == p.prefix || path == "/":
		http.Redirect(w, r, p.prefix+"/", http.StatusFound)
	default:
		http.NotFound(w, r)
	}
}

// zapHandler hands the toolkit's log records (TLS on or off, a web
// configuration file that no longer loads) to the daemon's logger.
type zapHandler struct{ core zapcore.Core }

func (h zapHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.core.Enabled(zapLevel(l))
}

func (h zapHandler) Handle(_ context.Context, r slog.Record) error {
	fields := make([]zap.Field, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		fields = append(fields, zap.Any(a.Key, a.Value.Resolve().Any()))
		return true
	})
	if ce := h.core.Check(zapcore.Entry{Level: zapLevel(r.Level), Time: r.Time, Message: r.Message}, nil); ce != nil {
		ce.Write(fields...)
	}
	return nil
}

func (h zapHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	fields := make([]zap.Field, 0, len(attrs))
	for _, a := range attrs {
		fields = append(fields, zap.Any(a.Key, a.Value.Resolve().Any()))
	}
	return zapHandler{h.core.With(fields)}
}

func (h zapHandler) WithGroup(string) slog.Handler { return h }

func zapLevel(l slog.Level) zapcore.Level {
	switch {
	case l >= slog.LevelError:
		return zapcore.ErrorLevel
	case l >= slog.LevelWarn:
		return zapcore.WarnLevel
	case l >= slog.LevelInfo:
		return zapcore.InfoLevel
	}
	return zapcore.DebugLevel
}
