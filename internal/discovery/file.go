package discovery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/internal/tick"
)

// Labels of a file_sd group that are settings, not labels copied onto
// its targets.
const (
	// LabelKind sets the group's kind (engine or gateway).
	LabelKind = "kind"
	// labelScheme and labelMetricsPath are Prometheus' names for a group's
	// scheme and metrics path.
	labelScheme      = "__scheme__"
	labelMetricsPath = "__metrics_path__"
)

// fileGroup is one group of a file_sd file, as Prometheus writes it.
type fileGroup struct {
	Targets []string          `json:"targets" yaml:"targets"`
	Labels  map[string]string `json:"labels" yaml:"labels"`
}

// fileSource lists and reads the files of one file_sd entry every refresh
// interval. A file that cannot be read or parsed keeps its last good
// targets (Prometheus' rule), is counted every time and logged once per
// distinct error; a file no longer matched by the globs, deleted or
// renamed away, takes its targets with it.
type fileSource struct {
	cfg   FileSDConfig // defaulted
	kick  func()
	known *lastKnown // by file

	parsed map[string]fileRead // last content read of each file, and what it gave; Run's goroutine only
}

// fileRead is a file's content and its targets or the error it gave.
type fileRead struct {
	data    []byte
	targets []scrape.Target
	err     error
}

func newFileSource(cfg FileSDConfig, failures prometheus.Counter, kick func(), logger *zap.Logger) *fileSource {
	return &fileSource{
		cfg:  cfg,
		kick: kick,
		known: newLastKnown(failures, logger, "file",
			"target file unreadable or invalid; keeping its last good targets", "target file valid again"),
		parsed: map[string]fileRead{},
	}
}

// run reads at once, reports synced, then refreshes until ctx is done.
func (s *fileSource) run(ctx context.Context, synced func()) {
	s.refresh()
	synced()
	tick.Every(ctx, s.cfg.RefreshInterval, func(time.Time) { s.refresh() })
}

// files lists the paths the globs match now, sorted and without repeats.
func (s *fileSource) files() []string {
	var out []string
	for _, pattern := range s.cfg.Files {
		matches, _ := filepath.Glob(pattern) // patterns are validated
		out = append(out, matches...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *fileSource) refresh() {
	matched := map[string]bool{}
	changed := false
	for _, path := range s.files() {
		targets, err := s.read(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // gone since it was listed: as if not matched
		}
		matched[path] = true
		if err != nil {
			s.known.failed(path, err)
			continue
		}
		if s.known.set(path, targets) {
			changed = true
		}
	}
	for path := range s.parsed {
		if matched[path] {
			continue
		}
		delete(s.parsed, path)
		if n, had := s.known.forget(path); had {
			changed = true
			s.known.logger.Info("target file gone; its targets are removed", zap.String("file", path), zap.Int("targets", n))
		}
	}
	if changed {
		s.kick()
	}
}

// read reads path and parses it when its content changed since the last
// read.
func (s *fileSource) read(path string) ([]scrape.Target, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if last, ok := s.parsed[path]; ok && bytes.Equal(last.data, data) {
		return last.targets, last.err
	}
	targets, err := s.parse(path, data)
	if err != nil {
		err = fmt.Errorf("%s: %w", path, err)
	}
	s.parsed[path] = fileRead{data: data, targets: targets, err: err}
	return targets, err
}

// parse decodes a file_sd file strictly (an unknown key is an error) and
// turns its groups into targets. Any bad group or target makes the whole
// file bad, so a typo never silently drops part of the fleet.
func (s *fileSource) parse(path string, data []byte) ([]scrape.Target, error) {
	var groups []fileGroup
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&groups); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	default: // .yml, .yaml (validated)
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&groups); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
	}
	var errs []error
	var out []scrape.Target
	for i, g := range groups {
		ts, err := s.groupTargets(fmt.Sprintf("[%d]", i), g)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, ts...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b scrape.Target) int { return strings.Compare(a.Name, b.Name) })
	return slices.CompactFunc(out, func(a, b scrape.Target) bool { return a.Name == b.Name }), nil
}

// groupTargets are the targets of one group; errors name their path in
// the file under prefix ("[0].targets[1]: ...").
func (s *fileSource) groupTargets(prefix string, g fileGroup) ([]scrape.Target, error) {
	var errs []error
	add := func(path, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", prefix, path, fmt.Sprintf(format, a...)))
	}
	scheme, urlPath, kind := s.cfg.Scheme, s.cfg.Path, s.cfg.Kind
	var labels map[string]string
	for _, k := range slices.Sorted(maps.Keys(g.Labels)) {
		v := g.Labels[k]
		switch {
		case v == "":
			// An empty label is no label, as in Prometheus.
		case k == labelScheme:
			scheme = v
		case k == labelMetricsPath:
			urlPath = v
		case k == LabelKind:
			kind = v
		case strings.HasPrefix(k, "__"):
			// Prometheus drops the other reserved labels after relabeling.
		case !model.LabelName(k).IsValidLegacy():
			add("labels", "%q is not a label name ([a-zA-Z_][a-zA-Z0-9_]*)", k)
		default:
			if labels == nil {
				labels = map[string]string{}
			}
			labels[k] = v // shared by the group's targets, read-only
		}
	}
	checkEndpoint("labels", scheme, urlPath, kind, add)
	var out []scrape.Target
	for i, addr := range g.Targets {
		host, port, err := net.SplitHostPort(addr)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil || host == "" || perr != nil || n < 1 || n > 65535:
			add(fmt.Sprintf("targets[%d]", i), "%q is not host:port", addr)
			continue
		case strings.ContainsAny(host, "/@ \t\n"):
			add(fmt.Sprintf("targets[%d]", i), "%q must be a bare host:port (no scheme, path or credentials)", addr)
			continue
		}
		hostPort := net.JoinHostPort(host, port)
		out = append(out, scrape.Target{
			Name:   s.cfg.NamePrefix + hostPort,
			URL:    scheme + "://" + hostPort + urlPath,
			Kind:   kind,
			Labels: labels,
			// Shared by the entry's targets, so they share one client.
			HTTPClient: s.cfg.HTTPClient,
		})
	}
	return out, errors.Join(errs...)
}

// targets returns the last good targets of every matched file, in file
// order.
func (s *fileSource) targets() []scrape.Target {
	var out []scrape.Target
	for _, path := range s.known.keys() {
		out = append(out, s.known.of(path)...)
	}
	return out
}
