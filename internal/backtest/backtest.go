// Package backtest replays history through the daemon's own decision path
// — the window store, the assessment (detectors, triage, correlation) and
// the alert tracker with its for/keep-firing timing, driven by eval.Loop —
// and returns the events it would have sent. Nothing is delivered.
//
// The history is a Source: a time-ordered stream of scrapes and evaluation
// instants (a recording of `watchdog record`, or scrapes read from a
// Prometheus-compatible API with evaluation instants every interval).
package backtest

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/internal/alert"
	"github.com/sglang-watchdog/sglang-watchdog/internal/assess"
	"github.com/sglang-watchdog/sglang-watchdog/internal/correlate"
	"github.com/sglang-watchdog/sglang-watchdog/internal/eval"
	"github.com/sglang-watchdog/sglang-watchdog/internal/slo"
	"github.com/sglang-watchdog/sglang-watchdog/internal/window"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/detect"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// Step is one element of the history: exactly one of Scrape (a scrape as
// the window receives it), Removed (a target leaving the scrape set) and
// Evaluate (an evaluation round at that instant) is set.
type Step struct {
	Scrape   *series.Scrape
	Removed  string
	Evaluate time.Time
}

// Source yields the history in the order the daemon would have seen it;
// ok is false after the last step.
type Source interface {
	Next() (step Step, ok bool, err error)
}

// Settings are the daemon settings the decisions depend on.
type Settings struct {
	ScrapeInterval time.Duration // sizes the window like the daemon's
	MaxSeries      int           // per replica; 0: the window's default
	Detectors      detect.Config
	Alerts         alert.Config
	Correlation    correlate.Config
	// SLOs are the objectives replayed: their memory starts empty at the
	// first step, as a daemon's does without history.url, so a rule is
	// judged once the replay spans its long window.
	SLOs slo.Config
	// Links are put in the events as the daemon would (runbook overrides,
	// external URL).
	Links alert.Links
}

// Result is what a replay found.
type Result struct {
	// First and Last are the first and last evaluation rounds (zero when
	// there were none).
	First, Last time.Time
	Rounds      int
	Scrapes     int
	// Rejected counts scrapes the window took only in part (a replica over
	// its series limit); the daemon logs these and goes on, and so does
	// the replay.
	Rejected int
	// Events are the events the alert tracker produced, in order: what
	// would have been handed to notification.
	Events []notify.Event
}

// Run replays src with s and returns every event the daemon would have
// produced. It stops at the first error of src.
func Run(src Source, s Settings) (Result, error) {
	if s.ScrapeInterval <= 0 {
		return Result{}, errors.New("backtest: scrape interval must be positive")
	}
	store, err := window.New(window.Options{
		// As the daemon sizes it (cmd/watchdog daemon).
		Retention:           s.Detectors.MaxLookback() + 2*s.ScrapeInterval,
		MaxSeriesPerReplica: s.MaxSeries,
		ScrapeInterval:      s.ScrapeInterval,
	}, nil)
	if err != nil {
		return Result{}, fmt.Errorf("backtest: window: %w", err)
	}
	detectors, err := detect.New(s.Detectors)
	if err != nil {
		return Result{}, fmt.Errorf("backtest: detectors: %w", err)
	}
	var book *slo.Book
	if len(s.SLOs.Objectives) > 0 {
		book = slo.NewBook(s.SLOs)
	}
	var res Result
	loop := eval.New(eval.Options{
		Assessor: assess.New(detectors, assess.Config{Triage: s.Detectors.Triage, Correlation: s.Correlation, SLOs: book}),
		Tracker:  alert.NewTracker(s.Alerts),
		Links:    s.Links,
		Windows:  store,
		Sender:   collect{&res.Events},
		Logger:   zap.NewNop(),
	}, nil)
	for {
		step, ok, err := src.Next()
		if err != nil {
			return res, err
		}
		if !ok {
			return res, nil
		}
		switch {
		case step.Scrape != nil:
			res.Scrapes++
			if err := store.Append(*step.Scrape); err != nil {
				res.Rejected++
			}
		case step.Removed != "":
			store.Remove(step.Removed)
		case !step.Evaluate.IsZero():
			if res.Rounds == 0 {
				res.First = step.Evaluate
			}
			res.Rounds++
			res.Last = step.Evaluate
			loop.Evaluate(step.Evaluate)
		}
	}
}

// collect keeps what the loop would have handed to the dispatcher.
type collect struct{ events *[]notify.Event }

func (c collect) Send(ev notify.Event) { *c.events = append(*c.events, ev) }

// Scrapes is a Source over scrapes in time order (e.g. read from a
// Prometheus-compatible API) with an evaluation round every interval from
// from to to. A round at t comes after the scrapes taken before t and
// before those taken at t or later, as in the daemon, where a scrape
// reaches the window only after it completes.
func Scrapes(scrapes []series.Scrape, from, to time.Time, every time.Duration) Source {
	return &scrapeSource{scrapes: scrapes, next: from, to: to, every: every}
}

type scrapeSource struct {
	scrapes  []series.Scrape
	next, to time.Time
	every    time.Duration
}

func (s *scrapeSource) Next() (Step, bool, error) {
	if s.every <= 0 {
		return Step{}, false, errors.New("backtest: evaluation interval must be positive")
	}
	roundDue := !s.next.After(s.to)
	if len(s.scrapes) > 0 && (!roundDue || s.scrapes[0].At.Before(s.next)) {
		sc := &s.scrapes[0]
		s.scrapes = s.scrapes[1:]
		return Step{Scrape: sc}, true, nil
	}
	if !roundDue {
		return Step{}, false, nil
	}
	at := s.next
	s.next = s.next.Add(s.every)
	return Step{Evaluate: at}, true, nil
}
