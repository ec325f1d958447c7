// Package leader elects one watchdog copy among several with a
// coordination.k8s.io Lease (client-go's leaderelection). The leader pages
// and owns the shared state ConfigMap; the others scrape and evaluate, ready
// to take over.
//
// Safety rests on the timings: a leader that cannot renew stops leading
// renew_deadline after the start of its last successful renewal, while
// another copy takes over no earlier than lease_duration after it saw that
// renewal; renew_deadline < lease_duration keeps the two apart (up to clock
// rate differences, as in Kubernetes' own controllers). The Elector tracks
// renewals itself rather than relying on client-go's OnStoppedLeading
// alone, which with ReleaseOnCancel only fires after a release attempt that
// can take another renew_deadline.
//
// Like client-go, this package measures real elapsed time; it is the one
// place below main that does.
package leader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Elector campaigns for the Lease and reports leadership changes.
type Elector struct {
	cfg      Config
	identity string
	client   kubernetes.Interface
	log      *zap.Logger
	now      func() time.Time

	leaderGauge prometheus.Gauge
	transitions prometheus.Counter

	onChange func(leader bool)
	running  atomic.Bool
	isLeader atomic.Bool
	signal   chan struct{} // cap 1: the leadership changed

	mu        sync.Mutex
	leading   bool
	renewedAt time.Time // start of the last successful renewal
	expiry    *time.Timer
	observed  string // holder last seen in the Lease
}

// New builds an elector for identity (the pod name; "" takes
// cfg.Identity). cfg is validated and defaulted; an empty namespace is the
// pod's own (OwnNamespace). It makes no request and starts nothing.
func New(cfg Config, client kubernetes.Interface, identity string, reg prometheus.Registerer, logger *zap.Logger) (*Elector, error) {
	if err := cfg.Validate("ha"); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("leader election: no Kubernetes client")
	}
	cfg = cfg.WithDefaults()
	if cfg.Namespace == "" {
		cfg.Namespace = OwnNamespace(os.Getenv, os.ReadFile)
	}
	if identity == "" {
		identity = cfg.Identity
	}
	if identity == "" {
		return nil, errors.New("leader election: empty identity; set ha.identity or HOSTNAME")
	}
	cfg.Identity = identity
	if logger == nil {
		logger = zap.NewNop()
	}
	f := promauto.With(reg)
	e := &Elector{
		cfg:      cfg,
		identity: identity,
		client:   client,
		log:      logger.With(zap.String("lease", cfg.Namespace+"/"+cfg.LeaseName), zap.String("identity", identity)),
		now:      time.Now,
		signal:   make(chan struct{}, 1),
		leaderGauge: f.NewGauge(prometheus.GaugeOpts{
			Name: "watchdog_leader",
			Help: "1 when this copy holds the leader Lease (it pages and writes the shared state), else 0.",
		}),
		transitions: f.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_leader_transitions_total",
			Help: "Times this copy became leader or stopped leading.",
		}),
	}
	if _, err := leaderelection.NewLeaderElector(e.electionConfig(context.Background())); err != nil {
		return nil, fmt.Errorf("leader election: %w", err)
	}
	return e, nil
}

// OnChange sets the function told of every leadership change (true: this
// copy now leads). Calls are serialised, in order, from one goroutine of
// Run, never while the lease renewal waits on them; changes that cancel out
// before a call are coalesced. A final false is delivered when Run stops
// while leading. Set it before Run.
func (e *Elector) OnChange(fn func(leader bool)) { e.onChange = fn }

// IsLeader reports whether this copy holds the lease now.
func (e *Elector) IsLeader() bool { return e.isLeader.Load() }

// Identity is this copy's name in the Lease.
func (e *Elector) Identity() string { return e.identity }

// Leader is the holder last seen in the Lease ("" when free or unknown).
func (e *Elector) Leader() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.observed
}

// Config is the effective configuration (defaults and namespace filled).
func (e *Elector) Config() Config { return e.cfg }

// Run campaigns until ctx is done: it acquires the lease, renews it, and
// after losing it campaigns again. When ctx ends while leading, the lease is
// released at once so another copy takes over without waiting for it to
// expire: cancel ctx only after the dispatcher has drained. Run returns nil
// when every goroutine it started has exited.
func (e *Elector) Run(ctx context.Context) error {
	if !e.running.CompareAndSwap(false, true) {
		return errors.New("leader election: Run called twice")
	}
	ctx = klog.NewContext(ctx, Logr(e.log.Named("client-go")))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { e.deliver(stop) })
	e.log.Info("campaigning for leadership", zap.Duration("lease_duration", e.cfg.LeaseDuration),
		zap.Duration("renew_deadline", e.cfg.RenewDeadline), zap.Duration("retry_period", e.cfg.RetryPeriod))
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(e.electionConfig(ctx))
		if err != nil { // validated in New
			close(stop)
			wg.Wait()
			return fmt.Errorf("leader election: %w", err)
		}
		le.Run(ctx)
		if ctx.Err() == nil {
			e.log.Info("campaigning again")
		}
	}
	e.lost("shutting down")
	e.mu.Lock()
	if e.expiry != nil {
		e.expiry.Stop()
	}
	e.mu.Unlock()
	close(stop)
	wg.Wait()
	return nil
}

func (e *Elector) electionConfig(ctx context.Context) leaderelection.LeaderElectionConfig {
	return leaderelection.LeaderElectionConfig{
		Lock: &trackingLock{Interface: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: e.cfg.LeaseName, Namespace: e.cfg.Namespace},
			Client:     e.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: e.identity},
			Labels:     map[string]string{"app.kubernetes.io/name": "sglang-watchdog"},
		}, e: e},
		LeaseDuration:   e.cfg.LeaseDuration,
		RenewDeadline:   e.cfg.RenewDeadline,
		RetryPeriod:     e.cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			// Acquisition is seen by the lock wrapper, synchronously;
			// this callback runs in a goroutine of its own and could
			// arrive after the loss.
			OnStartedLeading: func(context.Context) {},
			OnStoppedLeading: func() {
				reason := "lease lost: not renewed within renew_deadline"
				if ctx.Err() != nil {
					reason = "shutting down"
				}
				e.lost(reason)
			},
		},
	}
}

// deliver calls onChange for each change until stop, then once more if the
// last delivered state was "leading".
func (e *Elector) deliver(stop <-chan struct{}) {
	delivered := false
	for {
		final := false
		select {
		case <-e.signal:
		case <-stop:
			final = true
		}
		want := e.isLeader.Load() && !final
		if want != delivered {
			delivered = want
			if e.onChange != nil {
				e.onChange(want)
			}
		}
		if final {
			return
		}
	}
}

func (e *Elector) notify() {
	select {
	case e.signal <- struct{}{}:
	default:
	}
}

// renewed records a successful acquisition or renewal whose request
// started at start.
func (e *Elector) renewed(start time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.renewedAt = start
	left := e.cfg.RenewDeadline - e.now().Sub(start)
	if e.expiry == nil {
		e.expiry = time.AfterFunc(left, e.checkExpiry)
	} else {
		e.expiry.Reset(left)
	}
	e.observed = e.identity
	if e.leading {
		return
	}
	e.leading = true
	e.isLeader.Store(true)
	e.leaderGauge.Set(1)
	e.transitions.Inc()
	e.log.Info("became leader: this copy now delivers notifications and writes the shared state")
	e.notify()
}

func (e *Elector) checkExpiry() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leading {
		return
	}
	if since := e.now().Sub(e.renewedAt); since < e.cfg.RenewDeadline {
		e.expiry.Reset(e.cfg.RenewDeadline - since)
		return
	}
	e.loseLocked("lease not renewed within renew_deadline")
}

func (e *Elector) lost(reason string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.loseLocked(reason)
}

func (e *Elector) loseLocked(reason string) {
	if !e.leading {
		return
	}
	e.leading = false
	e.isLeader.Store(false)
	e.leaderGauge.Set(0)
	e.transitions.Inc()
	if e.expiry != nil {
		e.expiry.Stop()
	}
	e.log.Warn("stopped leading: this copy no longer delivers notifications", zap.String("reason", reason))
	e.notify()
}

func (e *Elector) observe(holder string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if holder == e.observed {
		return
	}
	e.observed = holder
	if holder == "" {
		e.log.Info("the lease is free")
		return
	}
	if holder != e.identity {
		e.log.Info("observed a new leader", zap.String("leader", holder))
	}
}

// trackingLock wraps the Lease lock to see, synchronously, every successful
// write of this copy's identity (an acquisition or renewal), every release,
// and every holder read.
type trackingLock struct {
	resourcelock.Interface
	e *Elector
}

func (l *trackingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil && rec != nil {
		l.e.observe(rec.HolderIdentity)
	}
	return rec, raw, err
}

func (l *trackingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	start := l.e.now()
	err := l.Interface.Create(ctx, ler)
	l.wrote(ler, start, err)
	return err
}

func (l *trackingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	start := l.e.now()
	err := l.Interface.Update(ctx, ler)
	l.wrote(ler, start, err)
	return err
}

func (l *trackingLock) wrote(ler resourcelock.LeaderElectionRecord, start time.Time, err error) {
	if err != nil {
		return // the renew deadline decides
	}
	if ler.HolderIdentity == l.e.identity {
		l.e.renewed(start)
		return
	}
	l.e.lost("released the lease")
	l.e.observe(ler.HolderIdentity)
}
