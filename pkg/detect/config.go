package detect

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config holds every detector's settings. It is the "detectors" section of
// the watchdog's YAML configuration: one section per Registry entry, named
// by its class, plus "triage"; durations are Go durations ("2m").
//
// A detector's settings are reached by their type: Get, Set and Edit. A
// Config is a value: copies are independent (Set never writes a shared
// map in place).
type Config struct {
	// catalog are the detectors the sections belong to; nil is
	// Registry()'s (a zero Config).
	catalog Catalog

	// sections holds each detector's settings (e.g. PreemptStormConfig) by
	// class. A missing section reads as the zero value, which does not
	// validate.
	sections map[Class]any

	// Triage tunes the layer triage attached to latency-type findings.
	Triage TriageConfig
}

// Get returns the settings of type T (e.g. PreemptStormConfig) in c.
func Get[T settings[T]](c Config) T {
	var zero T
	s, _ := c.sections[zero.class()].(T)
	return s
}

// Set replaces the settings of v's type in c.
func Set[T settings[T]](c *Config, v T) {
	m := make(map[Class]any, len(c.sections)+1)
	maps.Copy(m, c.sections)
	m[v.class()] = v
	c.sections = m
}

// Edit changes the settings of type T in c, e.g.
//
//	detect.Edit(&cfg, func(s *detect.PreemptStormConfig) { s.Range = time.Minute })
func Edit[T settings[T]](c *Config, edit func(*T)) {
	s := Get[T](*c)
	edit(&s)
	Set(c, s)
}

// triageDoc is the comment over the triage's section of configs/watchdog.yaml.
const triageDoc = "The layer triage every replica carries (not a detector: no enabled): running vs waiting vs latency."

// TriageConfig tunes the layer triage (running vs waiting vs latency).
type TriageConfig struct {
	// Range is the recent window running and queued requests are averaged
	// over.
	Range time.Duration `yaml:"range" doc:"running and queued requests are averaged over it"`
	// CapacityLookback: without max_running_requests exposed, the running
	// batch is compared with its highest value in this lookback.
	CapacityLookback time.Duration `yaml:"capacity_lookback" doc:"the batch cap is estimated from the highest running count seen"`
	// RunningHighFraction of the capacity is "running high".
	RunningHighFraction float64 `yaml:"running_high_fraction" doc:"of the batch cap is \"running high\""`
	// MinRunning: fewer running requests are never "high".
	MinRunning float64 `yaml:"min_running" doc:"fewer running requests are never \"high\""`
	// MinQueued and QueuedToRunning: "waiting high" is at least MinQueued
	// queued requests and at least QueuedToRunning per running one.
	MinQueued       float64 `yaml:"min_queued" doc:"\"waiting high\": at least this many queued ..."`
	QueuedToRunning float64 `yaml:"queued_to_running" doc:"... and this many per running request"`
	// KVFullUsage: KV usage at or above it means admission is bound by
	// memory.
	KVFullUsage float64 `yaml:"kv_full_usage" doc:"KV usage at which admission is bound by memory"`
	// LatencyRatio and LatencyBaseline: for a triage on its own (not
	// attached to a latency finding), latency is "high" when a p99 (TTFT,
	// inter-token, end-to-end) over Range is at least LatencyRatio times
	// its value in the LatencyBaseline before.
	LatencyRatio    float64       `yaml:"latency_ratio" doc:"a latency p99 or mean this many times its baseline is \"high\" ..."`
	LatencyBaseline time.Duration `yaml:"latency_baseline" doc:"... the baseline being this span before the range"`
	// SlowTTFT and SlowInterToken judge latency when no baseline covers
	// the range (a young replica, a one-shot `diagnose`): a p99 at or above
	// them is "high". They are for the triage only; nothing pages on them.
	SlowTTFT       time.Duration `yaml:"slow_ttft" doc:"without a baseline (young replica, diagnose): TTFT p99 this high is slow"`
	SlowInterToken time.Duration `yaml:"slow_inter_token" doc:"... and inter-token p99 this high"`
	// QueueWaitShare: when latency is high and the mean queue wait is at
	// least this share of the mean time to first token, the time goes to
	// waiting for admission (the scheduling side), not to execution;
	// unless few wait, the KV pool has room and the decode is slower (a
	// decode_slowdown finding, or the inter-token latency LatencyRatio
	// up): that wait is then the slower decode's backlog.
	QueueWaitShare float64 `yaml:"queue_wait_share" doc:"latency high and queue wait this share of TTFT: the scheduling side (not with few waiting, KV room and a slower decode: its backlog)"`
	// StuckMinRange: requests running while the decode progress counter
	// does not move over the range is "stuck" only when the range is at
	// least this long (SGLang moves the counter every 40 decode steps).
	StuckMinRange time.Duration `yaml:"stuck_min_range" doc:"requests held and no decode progress over at least this long: stuck"`
}

// DefaultConfig returns the production defaults of the Registry's
// detectors, tuned for a 5 s scrape interval.
func DefaultConfig() Config { return Registry().DefaultConfig() }

// Catalog returns the detectors c configures: those of the Catalog it was
// made from, the Registry's for a zero Config.
func (c Config) Catalog() Catalog {
	if c.catalog == nil {
		return Registry()
	}
	return c.catalog
}

func defaultTriage() TriageConfig {
	return TriageConfig{
		Range:               time.Minute,
		CapacityLookback:    time.Hour,
		RunningHighFraction: 0.8,
		MinRunning:          4,
		MinQueued:           5,
		QueuedToRunning:     0.25,
		KVFullUsage:         0.9,
		LatencyRatio:        1.5,
		LatencyBaseline:     time.Hour,
		SlowTTFT:            2500 * time.Millisecond,
		SlowInterToken:      200 * time.Millisecond,
		QueueWaitShare:      0.5,
		StuckMinRange:       10 * time.Second,
	}
}

func (c TriageConfig) validate(e *configErrors) {
	e.positiveDuration("range", c.Range)
	e.positiveDuration("capacity_lookback", c.CapacityLookback)
	e.fraction("running_high_fraction", c.RunningHighFraction)
	e.check(c.MinRunning >= 0, "min_running", "must not be negative, got %v", c.MinRunning)
	e.positive("min_queued", c.MinQueued)
	e.check(c.QueuedToRunning >= 0, "queued_to_running", "must not be negative, got %v", c.QueuedToRunning)
	e.fraction("kv_full_usage", c.KVFullUsage)
	e.check(c.LatencyRatio > 1, "latency_ratio", "must be greater than 1, got %v", c.LatencyRatio)
	e.positiveDuration("latency_baseline", c.LatencyBaseline)
	e.positiveDuration("slow_ttft", c.SlowTTFT)
	e.positiveDuration("slow_inter_token", c.SlowInterToken)
	e.fraction("queue_wait_share", c.QueueWaitShare)
	e.positiveDuration("stuck_min_range", c.StuckMinRange)
}

// configErrors collects validation problems, each prefixed with the YAML
// path of the offending field.
type configErrors struct {
	prefix string
	errs   []error
}

func (c *configErrors) check(ok bool, field, format string, args ...any) {
	if !ok {
		c.errs = append(c.errs, fmt.Errorf("%s.%s: %s", c.prefix, field, fmt.Sprintf(format, args...)))
	}
}

func (c *configErrors) positiveDuration(field string, d time.Duration) {
	c.check(d > 0, field, "must be a positive duration, got %s", d)
}

func (c *configErrors) fraction(field string, v float64) {
	c.check(v > 0 && v <= 1, field, "must be in (0,1], got %v", v)
}

func (c *configErrors) positive(field string, v float64) {
	c.check(v > 0, field, "must be positive, got %v", v)
}

func (c *configErrors) endpoints(field, v string) {
	c.check(strings.Trim(v, "|") != "" && !strings.Contains(v, "||"),
		field, "must list endpoints separated by \"|\", without empty entries, got %q", v)
}

func (c *configErrors) atLeastOne(field string, v float64) {
	c.check(v >= 1, field, "must be at least 1, got %v", v)
}

// Validate reports every invalid field at once (errors.Join), each error
// prefixed with its YAML path, e.g.
// "detectors.preempt_storm.kv_usage_threshold: must be in (0,1], got 1.5".
// Disabled detectors' settings are checked too.
func (c Config) Validate() error {
	errs := c.Catalog().check()
	for _, e := range c.Catalog() {
		errs = append(errs, e.Check(c)...)
	}
	tr := &configErrors{prefix: "detectors.triage"}
	c.Triage.validate(tr)
	errs = append(errs, tr.errs...)
	return errors.Join(errs...)
}

// MaxLookback is the longest history any enabled detector reads back from
// now; the window's retention must be at least this long.
func (c Config) MaxLookback() time.Duration {
	var m time.Duration
	for _, e := range c.Catalog() {
		if e.Enabled(c) {
			m = max(m, e.Lookback(c))
		}
	}
	if c.triageUsed() {
		m = max(m, c.Triage.CapacityLookback, c.Triage.Range+c.Triage.LatencyBaseline)
	}
	return m
}

// triageUsed reports whether an enabled detector attaches the triage.
func (c Config) triageUsed() bool {
	for _, e := range c.Catalog() {
		if e.Enabled(c) && e.usesTriage(c) {
			return true
		}
	}
	return false
}

// Reads are the families the detectors, the layer triage and the window's
// restart accounting read with c (canonical names, a histogram by its base
// name), sorted and without duplicates: every family a finding can rest on.
// Disabled detectors count too: the scraper's keep-set is fixed at start-up
// and a reload may switch a detector on. Readers above the detectors add
// theirs (assess.Reads).
func (c Config) Reads() []string {
	out := append(c.Triage.Reads(), restartFamilies()...)
	for _, e := range c.Catalog() {
		out = append(out, e.Reads(c)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// needs lists the enabled detectors' core needs, in Registry order.
func (c Config) needs() []need {
	var out []need
	for _, e := range c.Catalog() {
		if e.Enabled(c) {
			out = append(out, e.needs(c)...)
		}
	}
	return out
}

// New validates cfg and builds the enabled detectors, in Registry order.
func New(cfg Config) ([]Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	env := buildEnv{triage: cfg.Triage, needs: cfg.needs(), replicaDown: Get[ReplicaDownConfig](cfg),
		retryAvalanche: Get[RetryAvalancheConfig](cfg)}
	var ds []Detector
	for _, e := range cfg.Catalog() {
		if e.Enabled(cfg) {
			ds = append(ds, e.build(cfg, env))
		}
	}
	return ds, nil
}

// triageKey is the YAML key of the triage's settings, beside the
// detectors' sections.
const triageKey = "triage"

// UnmarshalYAML decodes the "detectors" section over c, strictly: a key
// that names no detector, or no field of a detector's settings, is an
// error with its line and path. Sections and fields not given keep their
// value in c.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: detectors: must be a mapping", n.Line)}}
	}
	if c.catalog == nil {
		c.catalog = Registry()
	}
	entries := map[string]Entry{}
	for _, e := range c.catalog {
		entries[string(e.Class())] = e
	}
	var problems []string
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if line, dup := seen[k.Value]; dup {
			problems = append(problems, fmt.Sprintf("line %d: detectors.%s: already given at line %d", k.Line, k.Value, line))
			continue
		}
		seen[k.Value] = k.Line
		if k.Value == triageKey {
			problems = append(problems, decodeSection(&c.Triage, "detectors."+triageKey, v)...)
			continue
		}
		e, ok := entries[k.Value]
		if !ok {
			problems = append(problems, fmt.Sprintf("line %d: detectors.%s: no such detector", k.Line, k.Value))
			continue
		}
		problems = append(problems, e.decode(c, v)...)
	}
	if len(problems) > 0 {
		return &yaml.TypeError{Errors: problems}
	}
	return nil
}

// decodeSection decodes n over *dst, rejecting keys that are not fields
// of T, nested settings included. The known keys come from encoding *dst:
// every settings field is encoded (none is omitempty, and none is a map,
// whose keys would be free).
func decodeSection[T any](dst *T, path string, n *yaml.Node) []string {
	var fields yaml.Node
	if err := fields.Encode(dst); err != nil {
		return []string{fmt.Sprintf("line %d: %s: %v", n.Line, path, err)}
	}
	problems := unknownKeys(n, &fields, path)
	if err := n.Decode(dst); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return append(problems, fmt.Sprintf("line %d: %s: %v", n.Line, path, err))
		}
		problems = append(problems, te.Errors...)
	}
	return problems
}

// unknownKeys lists the keys of the mapping given that known lacks, with
// their line and path, descending into mappings both have.
func unknownKeys(given, known *yaml.Node, path string) []string {
	if given.Kind == yaml.AliasNode {
		given = given.Alias
	}
	if given.Kind != yaml.MappingNode || known.Kind != yaml.MappingNode {
		return nil // a type mismatch is Decode's to report
	}
	fields := map[string]*yaml.Node{}
	for i := 0; i+1 < len(known.Content); i += 2 {
		fields[known.Content[i].Value] = known.Content[i+1]
	}
	var problems []string
	for i := 0; i+1 < len(given.Content); i += 2 {
		k := given.Content[i]
		field, ok := fields[k.Value]
		if !ok {
			problems = append(problems, fmt.Sprintf("line %d: %s.%s: no such field", k.Line, path, k.Value))
			continue
		}
		problems = append(problems, unknownKeys(given.Content[i+1], field, path+"."+k.Value)...)
	}
	return problems
}

// MarshalYAML encodes c as the "detectors" section: the detectors in
// Registry order, then the triage.
func (c Config) MarshalYAML() (any, error) {
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	add := func(key string, v *yaml.Node) {
		out.Content = append(out.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
	}
	for _, e := range c.Catalog() {
		v, err := e.encode(c)
		if err != nil {
			return nil, fmt.Errorf("detectors.%s: %w", e.Class(), err)
		}
		add(string(e.Class()), v)
	}
	var tr yaml.Node
	if err := tr.Encode(c.Triage); err != nil {
		return nil, fmt.Errorf("detectors.%s: %w", triageKey, err)
	}
	add(triageKey, &tr)
	return out, nil
}
