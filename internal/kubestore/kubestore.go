// Package kubestore keeps the watchdog's small JSON state documents (the
// notification outboxes and incident records, the firing alerts) in one
// ConfigMap, so that in a highly available deployment the instance that
// takes over the lease continues the incidents the previous leader opened:
// same PagerDuty dedup keys, same Slack messages.
//
// One key holds one document: its JSON in data, readable with kubectl, or,
// above CompressAbove (32 KiB), its gzip-compressed JSON in binaryData under
// the same name; the API server's 1 MiB limit holds roughly ten times more
// incident records that way. Writes are optimistic: every update carries the
// resourceVersion last read, and a conflict re-reads the ConfigMap and
// re-applies only the document being saved. Only the leader writes: a
// Store starts read-only when asked to, and SetWritable follows the lease.
//
// Load behaves like internal/state.Dir: a missing document leaves v
// untouched and returns nil; an undecodable one is moved aside to the key
// "<name>.corrupt-<unix>" and Load returns an error wrapping ErrCorrupt.
// Neither is fatal: corrupt state must never stop the daemon from paging.
package kubestore

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/sglang-watchdog/sglang-watchdog/internal/state"
)

// ErrCorrupt is wrapped by Load when a document was undecodable. It is the
// state directory's sentinel, so callers check one error for both stores.
var ErrCorrupt = state.ErrCorrupt

// ErrTooLarge is wrapped by Save when the ConfigMap would exceed MaxBytes.
var ErrTooLarge = errors.New("state ConfigMap would exceed its size limit")

// DefaultName is the ConfigMap's default name.
const DefaultName = "sglang-watchdog-state"

// MaxConfigMapBytes is the API server's limit on a ConfigMap: the keys and
// values of data and binaryData together.
const MaxConfigMapBytes = 1 << 20

// Defaults.
const (
	DefaultTimeout       = 5 * time.Second
	DefaultCompressAbove = 32 << 10
	maxConflicts         = 5
	corruptInfix         = ".corrupt-"
)

// Options configure a Store.
type Options struct {
	Namespace string // required
	Name      string // ConfigMap name; "" is DefaultName
	// Timeout bounds one Load or Save, retries included. The queues save
	// while holding their lock, so it is kept short; 0 is DefaultTimeout.
	Timeout time.Duration
	// MaxBytes is the size the ConfigMap's data may reach; 0 is
	// MaxConfigMapBytes. Tests lower it.
	MaxBytes int
	// CompressAbove stores documents whose JSON is larger than this many
	// bytes gzip-compressed, under the same key in binaryData: incident
	// records repeat the same texts, and compress about tenfold. Smaller
	// documents stay readable JSON in data. 0 is DefaultCompressAbove; a
	// negative value never compresses.
	CompressAbove int
	// ReadOnly starts the store as a follower: Save writes nothing until
	// SetWritable(true).
	ReadOnly bool
	Logger   *zap.Logger
}

// validName limits document names so that the moved-aside key
// "<name>.corrupt-<unix>" is still a valid ConfigMap key.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,199}$`)

// Store is a notify.Store (and the alert document's persister) backed by
// one ConfigMap. It is safe for concurrent use; writes are serialised.
type Store struct {
	client    kubernetes.Interface
	namespace string
	name      string
	timeout   time.Duration
	maxBytes  int
	gzipAbove int
	log       *zap.Logger
	writable  atomic.Bool

	wmu          sync.Mutex      // guards writeCtx; never held while acquiring mu
	writeCtx     context.Context // cancelled when the store stops being writable
	cancelWrites context.CancelFunc
	stale        atomic.Bool // cached must be re-read before the next write

	mu     sync.Mutex
	cached *corev1.ConfigMap // last version read or written; nil: unknown or absent

	dataBytes prometheus.Gauge
	writes    *prometheus.CounterVec
	conflicts prometheus.Counter
}

// Write results, the values of the "result" label.
const (
	resultWritten  = "written"
	resultSkipped  = "skipped_follower"
	resultFailed   = "failed"
	resultTooLarge = "too_large"
)

// New returns a store on ConfigMap opts.Name in opts.Namespace. It makes no
// request; the ConfigMap is created by the first Save.
func New(client kubernetes.Interface, opts Options, reg prometheus.Registerer) (*Store, error) {
	if client == nil {
		return nil, errors.New("kubestore: no Kubernetes client")
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if errs := validation.IsDNS1123Subdomain(opts.Name); len(errs) > 0 {
		return nil, fmt.Errorf("kubestore: ConfigMap name %q: %s", opts.Name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(opts.Namespace); len(errs) > 0 {
		return nil, fmt.Errorf("kubestore: namespace %q: %s", opts.Namespace, strings.Join(errs, "; "))
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxBytes <= 0 || opts.MaxBytes > MaxConfigMapBytes {
		opts.MaxBytes = MaxConfigMapBytes
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	switch {
	case opts.CompressAbove == 0:
		opts.CompressAbove = DefaultCompressAbove
	case opts.CompressAbove < 0:
		opts.CompressAbove = math.MaxInt
	}
	f := promauto.With(reg)
	s := &Store{
		client:    client,
		namespace: opts.Namespace,
		name:      opts.Name,
		timeout:   opts.Timeout,
		maxBytes:  opts.MaxBytes,
		gzipAbove: opts.CompressAbove,
		log:       opts.Logger.With(zap.String("configmap", opts.Namespace+"/"+opts.Name)),
		dataBytes: f.NewGauge(prometheus.GaugeOpts{
			Name: "watchdog_state_configmap_bytes",
			Help: "Bytes of data and binaryData in the state ConfigMap as last read or written; the API server refuses more than 1048576.",
		}),
		writes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "watchdog_state_configmap_writes_total",
			Help: "Saves of state documents to the ConfigMap by result (written, skipped_follower, failed, too_large).",
		}, []string{"result"}),
		conflicts: f.NewCounter(prometheus.CounterOpts{
			Name: "watchdog_state_configmap_conflicts_total",
			Help: "Writes to the state ConfigMap refused for a stale resourceVersion and retried.",
		}),
	}
	for _, r := range []string{resultWritten, resultSkipped, resultFailed, resultTooLarge} {
		s.writes.WithLabelValues(r)
	}
	s.writeCtx, s.cancelWrites = context.WithCancel(context.Background())
	if opts.ReadOnly {
		s.cancelWrites()
	}
	s.writable.Store(!opts.ReadOnly)
	return s, nil
}

// Describe is "namespace/name" of the ConfigMap.
func (s *Store) Describe() string { return s.namespace + "/" + s.name }

// SetWritable makes Save write (the leader) or skip (a follower: the
// leader owns the ConfigMap, and a follower's write would overwrite the
// leader's records with its own). Wire it to leadership changes before the
// dispatcher's SetActive. SetWritable(false) also aborts a write under way
// at once, so that a leader cut off from the API server does not hold the
// queues' locks (and keep delivering) until the write times out.
func (s *Store) SetWritable(w bool) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if w == s.writable.Load() {
		return
	}
	if !w {
		s.writable.Store(false)
		s.cancelWrites()
		return
	}
	s.writeCtx, s.cancelWrites = context.WithCancel(context.Background())
	// The cache may predate another leader's writes: read before the first
	// write (Save skips documents whose cached value is equal).
	s.stale.Store(true)
	s.writable.Store(true)
}

// writeContext bounds one write: the timeout, and the loss of leadership.
func (s *Store) writeContext() (context.Context, context.CancelFunc) {
	s.wmu.Lock()
	parent := s.writeCtx
	s.wmu.Unlock()
	return context.WithTimeout(parent, s.timeout)
}

// errNotWritable stops a write that was under way when leadership was lost.
var errNotWritable = errors.New("no longer the leader: not writing")

// Writable reports whether Save writes.
func (s *Store) Writable() bool { return s.writable.Load() }

// Load decodes document name into v. A missing ConfigMap or key leaves v
// untouched and returns nil. An undecodable value is moved to the key
// "<name>.corrupt-<unix>" (by the leader; a follower leaves it in place) and
// Load returns an error wrapping ErrCorrupt with v untouched. Any other
// failure (API unreachable, forbidden) is returned as is.
func (s *Store) Load(name string, v any, now time.Time) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("state document name %q is invalid", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	cm, err := s.get(ctx)
	if err != nil {
		return fmt.Errorf("state %s: reading ConfigMap %s: %w", name, s.Describe(), err)
	}
	if cm == nil {
		return nil
	}
	c := contents{data: cm.Data, bin: cm.BinaryData}
	stored, ok := c.raw(name)
	if !ok {
		return nil
	}
	js, err := c.json(name)
	if err == nil {
		err = decode(js, v)
	}
	if err != nil {
		return s.moveAside(name, stored, now, err)
	}
	return nil
}

// decode unmarshals raw into v only when it decodes completely: a type
// error half way through would otherwise leave v half filled.
func decode(raw []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("decode into non-pointer %T", v)
	}
	probe := reflect.New(rv.Elem().Type()).Interface()
	if err := json.Unmarshal(raw, probe); err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

func (s *Store) moveAside(name string, stored []byte, now time.Time, cause error) error {
	aside := fmt.Sprintf("%s%s%d", name, corruptInfix, now.Unix())
	if !s.writable.Load() {
		return fmt.Errorf("state %s: %w (left in place: a follower does not write the ConfigMap): %v", name, ErrCorrupt, cause)
	}
	wctx, cancel := s.writeContext()
	defer cancel()
	err := s.modify(wctx, func(c contents) bool {
		if cur, ok := c.raw(name); !ok || !bytes.Equal(cur, stored) {
			return false // rewritten meanwhile: nothing to move
		}
		c.rename(name, aside)
		return true
	})
	if err != nil {
		return fmt.Errorf("state %s: %w (could not move aside: %v): %v", name, ErrCorrupt, err, cause)
	}
	return fmt.Errorf("state %s: %w to key %s of ConfigMap %s: %v", name, ErrCorrupt, aside, s.Describe(), cause)
}

// Save encodes v and replaces document name. On a follower it writes
// nothing and returns nil. A ConfigMap that would exceed MaxBytes is left
// unchanged (after dropping moved-aside corrupt copies, oldest first, if
// that makes room) and Save returns an error wrapping ErrTooLarge.
func (s *Store) Save(name string, v any) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("state document name %q is invalid", name)
	}
	if !s.writable.Load() {
		s.writes.WithLabelValues(resultSkipped).Inc()
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state %s: encode: %w", name, err)
	}
	ctx, cancel := s.writeContext()
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, compressed := data, len(data) > s.gzipAbove
	if compressed {
		if stored, err = gzipped(data); err != nil {
			return fmt.Errorf("state %s: compress: %w", name, err)
		}
	}
	var tooLarge error
	err = s.modify(ctx, func(c contents) bool {
		tooLarge = nil
		if cur, ok := c.raw(name); ok && bytes.Equal(cur, stored) && c.isBinary(name) == compressed {
			return false
		}
		c.put(name, stored, compressed)
		if size := c.size(); size > s.maxBytes {
			dropped := c.compact(size - s.maxBytes)
			if size = c.size(); size > s.maxBytes {
				tooLarge = s.tooLarge(name, len(data), len(stored), size, c)
				return false
			}
			s.log.Warn("state ConfigMap near its size limit: dropped moved-aside corrupt documents",
				zap.Strings("dropped", dropped), zap.Int("bytes", size), zap.Int("limit", s.maxBytes))
		}
		return true
	})
	switch {
	case err != nil && !s.writable.Load():
		// Leadership was lost during the write: it was abandoned.
		s.writes.WithLabelValues(resultSkipped).Inc()
		return nil
	case tooLarge != nil:
		s.writes.WithLabelValues(resultTooLarge).Inc()
		return tooLarge
	case err != nil:
		s.writes.WithLabelValues(resultFailed).Inc()
		return fmt.Errorf("state %s: writing ConfigMap %s: %w", name, s.Describe(), err)
	}
	s.writes.WithLabelValues(resultWritten).Inc()
	return nil
}

func (s *Store) tooLarge(name string, jsonBytes, storedBytes, total int, c contents) error {
	var others []string
	for _, k := range c.keys() {
		if k != name {
			raw, _ := c.raw(k)
			others = append(others, fmt.Sprintf("%s=%d", k, len(raw)))
		}
	}
	size := fmt.Sprintf("%d bytes", jsonBytes)
	if storedBytes != jsonBytes {
		size = fmt.Sprintf("%d bytes (%d compressed)", jsonBytes, storedBytes)
	}
	return fmt.Errorf("state %s: %w: the document is %s, so ConfigMap %s would hold %d bytes of data, %d over the limit of %d (other documents: %s); the previous version is kept. Lower notify.max_pending, notify.max_records or notify.resolved_retention in the watchdog's configuration (they bound each integration's document)",
		name, ErrTooLarge, size, s.Describe(), total, total-s.maxBytes, s.maxBytes, strings.Join(others, ", "))
}

// contents are a ConfigMap's data and binaryData: a document is in one of
// them, plain JSON in data or gzip-compressed JSON in binaryData.
type contents struct {
	data map[string]string
	bin  map[string][]byte
}

func (c contents) raw(name string) ([]byte, bool) {
	if v, ok := c.data[name]; ok {
		return []byte(v), true
	}
	v, ok := c.bin[name]
	return v, ok
}

func (c contents) isBinary(name string) bool {
	_, ok := c.bin[name]
	return ok
}

// json is document name's JSON, decompressed if need be.
func (c contents) json(name string) ([]byte, error) {
	if v, ok := c.data[name]; ok {
		return []byte(v), nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(c.bin[name]))
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("decompress: %w", err)
	}
	return out, nil
}

func (c contents) put(name string, v []byte, binary bool) {
	delete(c.data, name)
	delete(c.bin, name)
	if binary {
		c.bin[name] = v
	} else {
		c.data[name] = string(v)
	}
}

func (c contents) rename(from, to string) {
	if v, ok := c.data[from]; ok {
		delete(c.data, from)
		c.data[to] = v
		return
	}
	if v, ok := c.bin[from]; ok {
		delete(c.bin, from)
		c.bin[to] = v
	}
}

func (c contents) keys() []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range c.data {
			if !yield(k) {
				return
			}
		}
		for k := range c.bin {
			if !yield(k) {
				return
			}
		}
	})
}

// size is what the API server counts against the limit: every key and
// value of data and binaryData.
func (c contents) size() int {
	n := 0
	for k, v := range c.data {
		n += len(k) + len(v)
	}
	for k, v := range c.bin {
		n += len(k) + len(v)
	}
	return n
}

// compact drops moved-aside corrupt documents, oldest first, until need
// bytes are freed or none is left, and returns the dropped keys. They are
// kept for a human to inspect, but never at the price of live state.
func (c contents) compact(need int) []string {
	type aside struct {
		key string
		at  int64
	}
	var cands []aside
	for _, k := range c.keys() {
		if i := strings.LastIndex(k, corruptInfix); i > 0 {
			at, _ := strconv.ParseInt(k[i+len(corruptInfix):], 10, 64)
			cands = append(cands, aside{k, at})
		}
	}
	slices.SortStableFunc(cands, func(a, b aside) int { return cmp.Compare(a.at, b.at) })
	var dropped []string
	for _, a := range cands {
		if need <= 0 {
			break
		}
		raw, _ := c.raw(a.key)
		need -= len(a.key) + len(raw)
		delete(c.data, a.key)
		delete(c.bin, a.key)
		dropped = append(dropped, a.key)
	}
	return dropped
}

// gzipped compresses js deterministically (no time stamp in the header), so
// an unchanged document compresses to unchanged bytes and is not rewritten.
func gzipped(js []byte) ([]byte, error) {
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(js); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// modify applies change to a copy of the ConfigMap's data and writes it
// with the cached resourceVersion, creating the ConfigMap if absent. On a
// conflict it re-reads and applies change again. change returns false when
// nothing needs writing. Callers hold s.mu.
func (s *Store) modify(ctx context.Context, change func(contents) bool) error {
	conflicts := 0
	for attempt := 0; ; attempt++ {
		if !s.writable.Load() {
			return errNotWritable
		}
		if s.stale.Swap(false) {
			s.cached = nil
		}
		if s.cached == nil {
			if _, err := s.get(ctx); err != nil {
				return err
			}
		}
		base := s.cached
		c := contents{data: map[string]string{}, bin: map[string][]byte{}}
		if base != nil {
			maps.Copy(c.data, base.Data)
			maps.Copy(c.bin, base.BinaryData)
		}
		if !change(c) {
			return nil
		}
		data, bin := c.data, c.bin
		if len(bin) == 0 {
			bin = nil
		}
		var (
			out *corev1.ConfigMap
			err error
		)
		if base == nil {
			out, err = s.client.CoreV1().ConfigMaps(s.namespace).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Name: s.name, Namespace: s.namespace,
					Labels: map[string]string{
						"app.kubernetes.io/name":       "sglang-watchdog",
						"app.kubernetes.io/component":  "state",
						"app.kubernetes.io/managed-by": "sglang-watchdog",
					},
				},
				Data:       data,
				BinaryData: bin,
			}, metav1.CreateOptions{})
		} else {
			next := base.DeepCopy()
			next.Data, next.BinaryData = data, bin
			out, err = s.client.CoreV1().ConfigMaps(s.namespace).Update(ctx, next, metav1.UpdateOptions{})
		}
		if err == nil {
			s.setCached(out)
			return nil
		}
		switch {
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err):
			// Someone else wrote (or deleted) it: re-read and re-apply.
			s.conflicts.Inc()
			conflicts++
			s.cached = nil
			if conflicts > maxConflicts {
				return fmt.Errorf("gave up after %d conflicting writes: %w", conflicts, err)
			}
		case transient(err):
			if werr := backoff(ctx, attempt); werr != nil {
				return fmt.Errorf("%w (retries stopped: %v)", err, werr)
			}
		default:
			return err
		}
	}
}

// get reads the ConfigMap into the cache, retrying transient failures
// until ctx is done. It returns nil, nil when the ConfigMap does not exist.
// Callers hold s.mu.
func (s *Store) get(ctx context.Context) (*corev1.ConfigMap, error) {
	for attempt := 0; ; attempt++ {
		cm, err := s.client.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
		switch {
		case err == nil:
			s.setCached(cm)
			return cm, nil
		case apierrors.IsNotFound(err):
			s.cached = nil
			return nil, nil
		case transient(err):
			if werr := backoff(ctx, attempt); werr != nil {
				return nil, fmt.Errorf("%w (retries stopped: %v)", err, werr)
			}
		default:
			return nil, err
		}
	}
}

func (s *Store) setCached(cm *corev1.ConfigMap) {
	s.cached = cm
	s.dataBytes.Set(float64(contents{data: cm.Data, bin: cm.BinaryData}.size()))
}

// transient reports whether a failed request is worth repeating: the API
// server was busy, timed out or unreachable. Refusals (forbidden, invalid)
// are not.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		code := st.Status().Code
		return code == 429 || code >= 500 || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err)
	}
	return true // transport errors: connection refused or reset, DNS
}

// backoff waits 50ms·2^attempt (at most 1s) or until ctx is done.
func backoff(ctx context.Context, attempt int) error {
	d := min(50*time.Millisecond<<min(attempt, 5), time.Second)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
