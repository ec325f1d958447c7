// Package silence keeps the silences (maintenance windows) that mute
// notifications: label matchers in Alertmanager's syntax over a time
// range, with who set it and why. The store is persisted as one state
// document, so silences survive restarts and, in HA mode, travel in the
// shared ConfigMap. The evaluation loop asks Mutes which silences cover an
// alert; the store itself sends and stops nothing.
package silence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/alertmanager/pkg/labels"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/sglang-watchdog/sglang-watchdog/internal/tick"
)

// Document is the state document holding the silences.
const Document = "silences"

// State of a silence, computed from its times and now.
type State string

// Silence states.
const (
	StatePending State = "pending" // starts in the future
	StateActive  State = "active"
	StateExpired State = "expired"
)

// Silence mutes the alerts whose labels match every matcher between
// StartsAt and EndsAt. Matchers are Alertmanager matchers
// (`replica="sim-0"`, `class=~"preempt.*"`, `severity!="info"`) over the
// alert's labels: replica, model, class (also as alertname), severity,
// incident and its target labels.
type Silence struct {
	ID        string    `json:"id"`
	Matchers  []string  `json:"matchers"`
	StartsAt  time.Time `json:"starts_at"`
	EndsAt    time.Time `json:"ends_at"`
	CreatedBy string    `json:"created_by"`
	Comment   string    `json:"comment"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Status is a silence with its state at the time it was read.
type Status struct {
	Silence
	State State `json:"state"`
}

// StateAt is the silence's state at now.
func (s Silence) StateAt(now time.Time) State {
	switch {
	case now.Before(s.StartsAt):
		return StatePending
	case now.Before(s.EndsAt):
		return StateActive
	default:
		return StateExpired
	}
}

// Limits bound what one silence and the store may hold, so a client cannot
// grow the state document (and the HA ConfigMap) without bound.
const (
	MaxMatchers      = 16
	MaxMatcherLength = 512
	MaxAuthorLength  = 128
	MaxCommentLength = 2048
)

// ErrNotFound is returned for an unknown silence ID.
var ErrNotFound = errors.New("silence not found")

// ErrAlreadyExpired is returned when expiring a silence that has ended.
var ErrAlreadyExpired = errors.New("silence already expired")

// InvalidError is a silence that cannot be accepted; its message says why.
type InvalidError struct{ Problems []string }

func (e *InvalidError) Error() string { return "invalid silence: " + strings.Join(e.Problems, "; ") }

// Persister stores documents (internal/state, internal/kubestore).
type Persister interface {
	Load(name string, v any, now time.Time) error
	Save(name string, v any) error
}

// Options of a Store.
type Options struct {
	// Persister keeps the silences; nil keeps them in memory only.
	Persister Persister
	// MaxSilences bounds the silences held, expired ones included.
	MaxSilences int
	// Retention is how long an expired silence stays listed before it is
	// dropped.
	Retention time.Duration
	// NewID returns a fresh ID; nil: a random UUID (crypto/rand).
	NewID func() string
}

// DefaultOptions are the production bounds: Alertmanager keeps expired
// silences for 5 days.
func DefaultOptions() Options {
	return Options{MaxSilences: 1000, Retention: 5 * 24 * time.Hour}
}

// Store holds the silences. It is safe for concurrent use: the HTTP API
// changes it while the evaluation loop reads it.
type Store struct {
	opts Options

	mu       sync.RWMutex
	silences map[string]entry

	gauge *prometheus.GaugeVec
}

type entry struct {
	Silence
	matchers labels.Matchers
}

// New builds an empty store and registers its metrics on reg; Load fills it.
func New(opts Options, reg prometheus.Registerer) *Store {
	if opts.NewID == nil {
		opts.NewID = func() string { return uuid.NewString() }
	}
	s := &Store{opts: opts, silences: map[string]entry{},
		gauge: promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchdog_silences", Help: "Silences held, by state (pending, active, expired).",
		}, []string{"state"}),
	}
	s.refreshGauge(time.Time{})
	return s
}

// Load replaces the silences with the stored document (at start, and at
// an HA takeover, where the previous leader's are the current ones).
// Stored silences that no longer parse are dropped and reported.
func (s *Store) Load(now time.Time) error {
	if s.opts.Persister == nil {
		return nil
	}
	var stored []Silence
	if err := s.opts.Persister.Load(Document, &stored, now); err != nil {
		return fmt.Errorf("silences: %w", err)
	}
	loaded := map[string]entry{}
	var errs []error
	for _, sil := range stored {
		ms, err := parseMatchers(sil.Matchers)
		switch {
		case err != nil:
		case sil.ID == "":
			err = errors.New("no ID")
		case len(ms) == 0 || matchesAll(ms, nil):
			// Add refuses these; a document edited by hand or written
			// by a broken version must not mute every page either.
			err = errors.New("its matchers match every alert")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("silences: stored silence %q dropped: %v", sil.ID, err))
			continue
		}
		loaded[sil.ID] = entry{Silence: sil, matchers: ms}
	}
	s.mu.Lock()
	s.silences = loaded
	s.gcLocked(now)
	s.mu.Unlock()
	s.refreshGauge(now)
	return errors.Join(errs...)
}

// Add validates in and stores it as a new silence; StartsAt zero means
// now. It returns the stored silence with its ID.
func (s *Store) Add(in Silence, now time.Time) (Status, error) {
	return s.add(in, now, "")
}

// add stores in as a new silence and, when replaced is not "", ends that
// silence in the same save.
func (s *Store) add(in Silence, now time.Time, replaced string) (Status, error) {
	if in.StartsAt.IsZero() {
		in.StartsAt = now
	}
	in.Matchers = slices.Clone(in.Matchers)
	ms, err := validate(in, now)
	if err != nil {
		return Status{}, err
	}
	for i, m := range ms {
		in.Matchers[i] = m.String()
	}
	in.ID = s.opts.NewID()
	in.CreatedAt, in.UpdatedAt = now, now
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gcLocked(now)
	if s.opts.MaxSilences > 0 && len(s.silences) >= s.opts.MaxSilences {
		return Status{}, &InvalidError{Problems: []string{fmt.Sprintf("the store holds its maximum of %d silences; expire some or wait for expired ones to be dropped", s.opts.MaxSilences)}}
	}
	next := maps.Clone(s.silences)
	if replaced != "" {
		e, ok := next[replaced]
		if !ok {
			return Status{}, ErrNotFound
		}
		if e.StateAt(now) != StateExpired {
			next[replaced] = ended(e, now)
		}
	}
	next[in.ID] = entry{Silence: in, matchers: ms}
	if err := s.commitLocked(next, now); err != nil {
		return Status{}, err
	}
	return Status{Silence: in, State: in.StateAt(now)}, nil
}

// Replace is how Alertmanager's API updates a silence: old ends now (when
// it has not ended already) and in is stored as a new silence, both in
// one save. It returns the new silence.
func (s *Store) Replace(old string, in Silence, now time.Time) (Status, error) {
	return s.add(in, now, old)
}

// Expire ends a pending or active silence now.
func (s *Store) Expire(id string, now time.Time) (Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.silences[id]
	if !ok {
		return Status{}, ErrNotFound
	}
	if e.StateAt(now) == StateExpired {
		return Status{}, ErrAlreadyExpired
	}
	next := maps.Clone(s.silences)
	next[id] = ended(e, now)
	if err := s.commitLocked(next, now); err != nil {
		return Status{}, err
	}
	return Status{Silence: next[id].Silence, State: StateExpired}, nil
}

// ended is e ended at now: its end, and a future start, become now.
func ended(e entry, now time.Time) entry {
	if now.Before(e.StartsAt) {
		e.StartsAt = now
	}
	e.EndsAt, e.UpdatedAt = now, now
	return e
}

// commitLocked saves next and makes it current; a failed save changes
// nothing, so what the API answered is what a restart will find.
func (s *Store) commitLocked(next map[string]entry, now time.Time) error {
	if s.opts.Persister != nil {
		if err := s.opts.Persister.Save(Document, sorted(next)); err != nil {
			return fmt.Errorf("saving silences: %w", err)
		}
	}
	s.silences = next
	s.refreshGaugeLocked(now)
	return nil
}

// List returns every silence with its state at now: active first, then
// pending, then expired, each by end time.
func (s *Store) List(now time.Time) []Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Status, 0, len(s.silences))
	for _, sil := range sorted(s.silences) {
		out = append(out, Status{Silence: sil, State: sil.StateAt(now)})
	}
	rank := map[State]int{StateActive: 0, StatePending: 1, StateExpired: 2}
	slices.SortStableFunc(out, func(a, b Status) int { return rank[a.State] - rank[b.State] })
	return out
}

// Get returns one silence with its state at now.
func (s *Store) Get(id string, now time.Time) (Status, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.silences[id]
	if !ok {
		return Status{}, false
	}
	return Status{Silence: e.Silence, State: e.StateAt(now)}, true
}

// Mutes returns the IDs (sorted) of the silences active at now whose
// matchers all match lset. A label the alert lacks has the value "", as
// in Alertmanager.
func (s *Store) Mutes(lset map[string]string, now time.Time) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var ids []string
	for id, e := range s.silences {
		if e.StateAt(now) != StateActive {
			continue
		}
		if matchesAll(e.matchers, lset) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// Sweep drops silences expired longer than the retention and refreshes
// the state gauge; the evaluation loop calls it once per round.
func (s *Store) Sweep(now time.Time) {
	s.mu.Lock()
	if s.gcLocked(now) && s.opts.Persister != nil {
		// Best effort: a failed save only delays forgetting.
		s.opts.Persister.Save(Document, sorted(s.silences))
	}
	s.refreshGaugeLocked(now)
	s.mu.Unlock()
}

func (s *Store) gcLocked(now time.Time) bool {
	dropped := false
	for id, e := range s.silences {
		if e.StateAt(now) == StateExpired && now.Sub(e.EndsAt) >= s.opts.Retention {
			delete(s.silences, id)
			dropped = true
		}
	}
	return dropped
}

func (s *Store) refreshGauge(now time.Time) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.refreshGaugeLocked(now)
}

func (s *Store) refreshGaugeLocked(now time.Time) {
	counts := map[State]int{}
	for _, e := range s.silences {
		counts[e.StateAt(now)]++
	}
	for _, st := range []State{StatePending, StateActive, StateExpired} {
		s.gauge.WithLabelValues(string(st)).Set(float64(counts[st]))
	}
}

func sorted(m map[string]entry) []Silence {
	out := make([]Silence, 0, len(m))
	for _, id := range slices.Sorted(maps.Keys(m)) {
		out = append(out, m[id].Silence)
	}
	slices.SortStableFunc(out, func(a, b Silence) int { return a.EndsAt.Compare(b.EndsAt) })
	return out
}

func matchesAll(ms labels.Matchers, lset map[string]string) bool {
	for _, m := range ms {
		if !m.Matches(lset[m.Name]) {
			return false
		}
	}
	return true
}

func parseMatchers(raw []string) (labels.Matchers, error) {
	out := make(labels.Matchers, 0, len(raw))
	for _, r := range raw {
		m, err := labels.ParseMatcher(r)
		if err != nil {
			return nil, fmt.Errorf("matcher %q: %v", r, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// validate reports every problem of in at once.
func validate(in Silence, now time.Time) (labels.Matchers, error) {
	var problems []string
	add := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	var ms labels.Matchers
	switch {
	case len(in.Matchers) == 0:
		add(`matchers: at least one is required, e.g. replica="sim-0"`)
	case len(in.Matchers) > MaxMatchers:
		add("matchers: at most %d, got %d", MaxMatchers, len(in.Matchers))
	default:
		for i, r := range in.Matchers {
			if len(r) > MaxMatcherLength {
				add("matchers[%d]: longer than %d bytes", i, MaxMatcherLength)
				continue
			}
			m, err := labels.ParseMatcher(r)
			if err != nil {
				add("matchers[%d]: %q is not a matcher like replica=\"sim-0\" or class=~\"preempt.*\": %v", i, r, err)
				continue
			}
			ms = append(ms, m)
		}
		if len(ms) == len(in.Matchers) && matchesAll(ms, nil) {
			add("matchers: they all match an alert without labels, so the silence would mute everything; name at least one label value")
		}
	}
	if in.EndsAt.IsZero() {
		add("ends_at: required")
	} else {
		if !in.EndsAt.After(in.StartsAt) {
			add("ends_at: %s is not after starts_at %s", in.EndsAt.Format(time.RFC3339), in.StartsAt.Format(time.RFC3339))
		}
		if !in.EndsAt.After(now) {
			add("ends_at: %s is in the past", in.EndsAt.Format(time.RFC3339))
		}
	}
	if strings.TrimSpace(in.CreatedBy) == "" {
		add("created_by: required (who set the silence)")
	}
	if n := utf8.RuneCountInString(in.CreatedBy); n > MaxAuthorLength {
		add("created_by: at most %d characters, got %d", MaxAuthorLength, n)
	}
	if n := utf8.RuneCountInString(in.Comment); n > MaxCommentLength {
		add("comment: at most %d characters, got %d", MaxCommentLength, n)
	}
	if len(problems) > 0 {
		return nil, &InvalidError{Problems: problems}
	}
	return ms, nil
}

// Follow reloads the stored silences every interval while following
// reports that this copy is an HA follower, so a follower mutes what the
// leader's silences mute (its standby events, caught up at a takeover,
// must not include pages the leader held back). It returns when ctx is
// done.
func (s *Store) Follow(ctx context.Context, interval time.Duration, following func() bool, onError func(error)) error {
	tick.Every(ctx, interval, func(now time.Time) {
		if !following() {
			return
		}
		if err := s.Load(now); err != nil && onError != nil {
			onError(err)
		}
	})
	return nil
}
