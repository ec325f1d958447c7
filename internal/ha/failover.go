package ha

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/sglang-watchdog/sglang-watchdog/pkg/notify"
)

// Elector campaigns for the leader Lease and reports each change of
// leadership, serialised, from Run (internal/leader).
type Elector interface {
	OnChange(fn func(leader bool))
	Run(ctx context.Context) error
}

// Store is the shared state store (internal/kubestore), or the writer in
// front of it (pkg/persist), which passes the switch on and drops what this
// copy saved and had not written; only the leader may write it.
type Store interface {
	SetWritable(writable bool)
}

// Dispatcher delivers notifications; only the leader delivers
// (pkg/notify).
type Dispatcher interface {
	SetActive(active bool, now time.Time) error
	OpenIncidents() []notify.Event
}

// Evaluator is the evaluation loop; a new leader continues the incidents
// the old one left open (internal/eval).
type Evaluator interface {
	Takeover(open []notify.Event, now time.Time)
}

// Options of a Failover. Every collaborator is required.
type Options struct {
	Elector    Elector
	Store      Store
	Dispatcher Dispatcher
	Evaluator  Evaluator
	// Now reads the clock at each switch; main passes time.Now, as the
	// Lease itself runs on real elapsed time.
	Now    func() time.Time
	Logger *zap.Logger
}

// Failover runs the elector and switches this copy between follower and
// leader on each change it reports.
type Failover struct {
	opts Options
}

// New checks the collaborators and registers with the elector; it starts
// nothing.
func New(opts Options) (*Failover, error) {
	if opts.Elector == nil || opts.Store == nil || opts.Dispatcher == nil || opts.Evaluator == nil || opts.Now == nil {
		return nil, errors.New("ha: failover needs an elector, a store, a dispatcher, an evaluator and a clock")
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	f := &Failover{opts: opts}
	opts.Elector.OnChange(f.switchTo)
	return f, nil
}

// Run campaigns until ctx is done and returns when the elector has stopped
// (having released the lease and told this copy it no longer leads). Cancel
// ctx only after the dispatcher has drained, so the next leader does not
// start while this one still delivers.
func (f *Failover) Run(ctx context.Context) error { return f.opts.Elector.Run(ctx) }

// switchTo makes this copy the leader or a follower.
//
// Losing the lease, the store stops writing first: a copy that lost it must
// not overwrite the new leader's records, even with a delivery under way,
// nor later with what it saved and had not written yet.
// Gaining it, the store becomes writable before the dispatcher activates,
// since activation reads the old leader's records and writes the catch-up;
// the evaluator then restores the incidents the dispatcher holds open that
// this copy's tracker does not know, and saves its alerts over the old
// leader's document.
func (f *Failover) switchTo(leading bool) {
	now := f.opts.Now()
	f.opts.Store.SetWritable(leading)
	if err := f.opts.Dispatcher.SetActive(leading, now); err != nil {
		f.opts.Logger.Error("notification state unreadable at takeover; starting empty (duplicates are possible, losses are not)", zap.Error(err))
	}
	if !leading {
		f.opts.Logger.Info("following: notification delivery and state writes stopped")
		return
	}
	open := f.opts.Dispatcher.OpenIncidents()
	f.opts.Evaluator.Takeover(open, now)
	f.opts.Logger.Info("leading: delivering notifications and writing the shared state",
		zap.Int("open_incidents", len(open)), zap.Duration("switch_took", f.opts.Now().Sub(now)))
}
