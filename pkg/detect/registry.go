package detect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Registry lists every detector of the daemon, in the order New builds
// them (the order of their findings). A detector is one file holding its
// class, its detector type and its settings type, plus one line here.
// Everything that iterates detectors (Validate, MaxLookback, New,
// metrics_blind's needs, the YAML section, diagnose's one-shot adaptation,
// the runbooks, the generated documentation) iterates a Catalog: the one a
// Config was made from (Catalog.DefaultConfig), this one in the daemon.
//
// It is a function returning a fresh slice, not a package variable, so no
// caller can change it for another.
func Registry() Catalog {
	return Catalog{
		detector[ReplicaDownConfig](),
		detector[ReplicaRestartedConfig](),
		detector[PreemptStormConfig](),
		detector[CacheCollapseConfig](),
		detector[RetryAvalancheConfig](),
		detector[KVSaturationConfig](),
		detector[EngineHangConfig](),
		detector[QueueLatencyConfig](),
		detector[DecodeSlowdownConfig](),
		detector[ColdStartConfig](),
		detector[LoraThrashConfig](),
		detector[PDTransferFailureConfig](),
		detector[ErrorRateConfig](),
		detector[MetricsBlindConfig](),
		detector[GPUFaultConfig](),
		detector[GPUThrottledConfig](),
	}
}

// Catalog is a list of detectors, one registry line each: Registry() is the
// daemon's. A Config is made from one (DefaultConfig) and carries it, so
// decoding, validating and building that Config know its detectors.
type Catalog []Entry

// DefaultConfig returns the defaults of c's detectors and of the triage.
func (c Catalog) DefaultConfig() Config {
	cfg := Config{catalog: c, sections: make(map[Class]any, len(c)), Triage: defaultTriage()}
	for _, e := range c {
		cfg.sections[e.Class()] = e.defaults()
	}
	return cfg
}

// check reports classes that cannot name a YAML section of their own:
// given twice, or named like the triage's section.
func (c Catalog) check() []error {
	var errs []error
	seen := map[Class]bool{}
	for _, e := range c {
		switch k := e.Class(); {
		case seen[k]:
			errs = append(errs, fmt.Errorf("detectors: class %q is registered twice", k))
		case k == triageKey:
			errs = append(errs, fmt.Errorf("detectors: class %q is the triage's section", k))
		default:
			seen[k] = true
		}
	}
	return errs
}

// Explains reports whether finding cause, active on the same replica,
// explains finding effect, by the positions the detectors of c declare
// (see the package function Explains). A class c lacks has no position:
// it explains nothing and nothing explains it.
func (c Catalog) Explains(cause, effect Finding) bool {
	var cp, ep position
	for _, e := range c {
		k := e.Class()
		if k == cause.Class {
			cp = e.position(cause)
		}
		if k == effect.Class {
			ep = e.position(effect)
		}
	}
	if cp.stage > 0 && ep.stage > 0 {
		return cp.stage < ep.stage
	}
	return slices.Contains(cp.explains, effect.Class) || slices.Contains(ep.explainedBy, cause.Class)
}

// SelfSustaining reports whether f, once started, feeds on itself and so
// does not clear with its cause (a retry loop): its steps stay on the
// page of the incident it belongs to, first.
func (c Catalog) SelfSustaining(f Finding) bool {
	for _, e := range c {
		if e.Class() == f.Class {
			return e.position(f).sustains
		}
	}
	return false
}

// Title is class's name on a page ("Preemption storm"); a class c lacks
// is named after its identifier.
func (c Catalog) Title(class Class) string {
	for _, e := range c {
		if e.Class() == class {
			if n := e.doc().name; n != "" {
				return n
			}
		}
	}
	s := strings.ReplaceAll(string(class), "_", " ")
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// position is a finding's place in the causal order Explains follows,
// declared with its detector.
type position struct {
	// stage is its place on the mechanism chain: it explains every
	// finding of a higher stage. Zero: off the chain.
	stage int
	// explains are the classes it explains beside the chain's order.
	explains []Class
	// explainedBy are the classes that explain it beside the chain's
	// order.
	explainedBy []Class
	// sustains says that, once started, it feeds on itself (a retry loop):
	// it does not clear with its cause, and its own steps stop the harm.
	sustains bool
}

// settings is what a detector's settings type (PreemptStormConfig, ...)
// provides, in the detector's own file. The type is also the key of the
// settings in a Config: Get, Set and Edit find them by it.
type settings[T any] interface {
	// class is the detector's class; its YAML section under "detectors"
	// has the same name.
	class() Class
	enabled() bool
	// disabled is a copy with the detector switched off.
	disabled() T
	// validate reports invalid fields by their YAML key; e carries the
	// section's path.
	validate(e *configErrors)
	// lookback is the longest history the detector reads back from now.
	lookback() time.Duration
	// needs are the families the detector cannot work without;
	// metrics_blind reports a replica that lacks them.
	needs() []need
	// reads are every family the detector reads from a window, with these
	// settings (canonical names; a histogram by its base name): the
	// scraper keeps these and drops the rest at parse time, so a family
	// read but not declared is never there to read. It includes every
	// family of needs.
	reads() []string
	// usesTriage: the detector attaches the layer triage, so the triage's
	// look-back counts.
	usesTriage() bool
	// oneShot adapts the settings to a one-shot observation: a few scrapes
	// spanning lookback and nothing before them (watchdog diagnose).
	oneShot(lookback time.Duration, samples int) (T, OneShot)
	build(env buildEnv) Detector
	// defaults are the production settings (called on the zero value).
	defaults() T
	// severities are the severities its findings can carry, lowest first.
	severities() []Severity
	// doc describes the detector for the generated documentation.
	doc() doc
	// position is the causal position of f, one of its findings: its
	// stage on the mechanism chain, or what it explains off it and what
	// explains it (Explains).
	position(f Finding) position
}

// buildEnv is what a detector may take from the rest of the configuration
// when it is built.
type buildEnv struct {
	triage TriageConfig
	// needs are the enabled detectors' needs (metrics_blind's input).
	needs []need
	// replicaDown tells replica_restarted which restarts replica_down
	// already reports (crash loops, outages it paged).
	replicaDown ReplicaDownConfig
	// retryAvalanche gives error_rate the rule retry_avalanche estimates
	// an engine's fresh traffic by.
	retryAvalanche RetryAvalancheConfig
}

// OneShot says what a detector can judge from a one-shot observation
// (the daemon compares minutes with the hour before them; a one-shot has
// only the few scrapes it just took).
type OneShot struct {
	// Judged is false when the detector can only judge relative to a
	// baseline and so stays silent: "needs history".
	Judged bool
	// Note tells the reader what was and was not judged, and what to look
	// at instead.
	Note string
}

// Entry is one detector of the Registry, seen through a Config.
type Entry interface {
	// Class is the detector's class and the name of its YAML section.
	Class() Class
	Enabled(c Config) bool
	// Lookback is the longest history the detector reads with c's
	// settings, enabled or not (its triage excluded).
	Lookback(c Config) time.Duration
	// Check returns the problems of the detector's settings in c, each
	// prefixed with its YAML path.
	Check(c Config) []error
	// OneShot returns c with the detector's settings adapted to a one-shot
	// of samples scrapes spanning lookback, and what it can judge then.
	OneShot(c Config, lookback time.Duration, samples int) (Config, OneShot)
	// Disable returns c with the detector off and its settings reset to
	// the defaults (Validate checks disabled sections too).
	Disable(c Config) Config
	// Severities are the severities the detector's findings can carry,
	// lowest first: its runbook must describe exactly these.
	Severities() []Severity
	// Signals are the families the detector needs with its default
	// settings, every alternative of every need (what metrics_blind checks
	// for): its runbook must name each.
	Signals() []string
	// Reads are the families the detector reads with c's settings
	// (canonical names; a histogram by its base name).
	Reads(c Config) []string
	// UsesTriage: the detector attaches the layer triage with c, and so
	// also reads what the triage reads.
	UsesTriage(c Config) bool

	defaults() any
	doc() doc
	position(f Finding) position
	needs(c Config) []need
	usesTriage(c Config) bool
	build(c Config, env buildEnv) Detector
	decode(c *Config, n *yaml.Node) []string
	encode(c Config) (*yaml.Node, error)
}

// entry implements Entry for the settings type T. It holds nothing: a
// Config carrying its Catalog stays comparable with reflect.DeepEqual.
type entry[T settings[T]] struct{}

// detector is a registry line: the detector whose settings type is T.
func detector[T settings[T]]() Entry { return entry[T]{} }

// defaultSettings are T's defaults.
func (e entry[T]) defaultSettings() T { var zero T; return zero.defaults() }

func (e entry[T]) Class() Class { var zero T; return zero.class() }

func (e entry[T]) Enabled(c Config) bool { return Get[T](c).enabled() }

func (e entry[T]) Lookback(c Config) time.Duration { return Get[T](c).lookback() }

func (e entry[T]) Check(c Config) []error {
	errs := &configErrors{prefix: "detectors." + string(e.Class())}
	Get[T](c).validate(errs)
	return errs.errs
}

func (e entry[T]) OneShot(c Config, lookback time.Duration, samples int) (Config, OneShot) {
	s, how := Get[T](c).oneShot(lookback, samples)
	Set(&c, s)
	return c, how
}

func (e entry[T]) Disable(c Config) Config {
	Set(&c, e.defaultSettings().disabled())
	return c
}

func (e entry[T]) Severities() []Severity { return e.defaultSettings().severities() }

func (e entry[T]) Signals() []string {
	var out []string
	for _, n := range e.defaultSettings().needs() {
		for _, families := range n.anyOf {
			out = append(out, families...)
		}
	}
	return out
}

func (e entry[T]) Reads(c Config) []string { return Get[T](c).reads() }

func (e entry[T]) UsesTriage(c Config) bool { return Get[T](c).usesTriage() }

func (e entry[T]) defaults() any { return e.defaultSettings() }

func (e entry[T]) doc() doc { var zero T; return zero.doc() }

func (e entry[T]) position(f Finding) position { var zero T; return zero.position(f) }

func (e entry[T]) needs(c Config) []need { return Get[T](c).needs() }

func (e entry[T]) usesTriage(c Config) bool { return Get[T](c).usesTriage() }

func (e entry[T]) build(c Config, env buildEnv) Detector { return Get[T](c).build(env) }

func (e entry[T]) decode(c *Config, n *yaml.Node) []string {
	s := Get[T](*c)
	problems := decodeSection(&s, "detectors."+string(e.Class()), n)
	Set(c, s)
	return problems
}

func (e entry[T]) encode(c Config) (*yaml.Node, error) {
	var n yaml.Node
	err := n.Encode(Get[T](c))
	return &n, err
}
