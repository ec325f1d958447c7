package discovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sglang-watchdog/sglang-watchdog/internal/scrape"
	"github.com/sglang-watchdog/sglang-watchdog/pkg/series"
)

// serviceAccountNamespace is where Kubernetes mounts the pod's namespace.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// userAgent identifies the watchdog's requests in API server audit logs.
const userAgent = "sglang-watchdog"

// NewClient builds a Kubernetes client: from the kubeconfig file when a
// path is given (running outside the cluster), else from the pod's service
// account (rest.InClusterConfig).
func NewClient(kubeconfig string) (kubernetes.Interface, error) {
	var (
		cfg *rest.Config
		err error
	)
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	cfg.UserAgent = userAgent
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, nil
}

// ownNamespace is the namespace the watchdog runs in: the current
// context's namespace of the kubeconfig when a path is given, else the
// pod's own (read from saFile, its service account's), else "default".
// Discovery watches it when kubernetes.namespaces is empty.
func ownNamespace(kubeconfig, saFile string) string {
	if kubeconfig != "" {
		loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{})
		if ns, _, err := loader.Namespace(); err == nil && ns != "" {
			return ns
		}
		return metav1.NamespaceDefault
	}
	if b, err := os.ReadFile(saFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return metav1.NamespaceDefault
}

// kubeSource turns the pods of one informer per namespace into targets.
// Informers only signal; targets are recomputed from their caches by the
// Discoverer's loop, so a burst of events costs one pass.
type kubeSource struct {
	cfg        KubernetesConfig // defaulted
	selector   labels.Selector
	portNumber int    // the configured port when numeric
	portName   string // else the container port name to look up
	namespaces []string
	logger     *zap.Logger
	failures   prometheus.Counter
	kick       func()

	factories []informers.SharedInformerFactory
	informers []cache.SharedIndexInformer

	errMu   sync.Mutex
	lastErr string // last watch failure, logged once per change
}

func newKubeSource(cfg KubernetesConfig, namespaces []string, client kubernetes.Interface,
	failures prometheus.Counter, kick func(), logger *zap.Logger) (*kubeSource, error) {
	sel, err := labels.Parse(cfg.LabelSelector)
	if err != nil {
		return nil, fmt.Errorf("label selector: %w", err)
	}
	k := &kubeSource{
		cfg:        cfg,
		selector:   sel,
		namespaces: namespaces,
		logger:     logger,
		failures:   failures,
		kick:       kick,
	}
	if n, err := strconv.Atoi(cfg.Port); err == nil {
		k.portNumber = n
	} else {
		k.portName = cfg.Port
	}
	for _, ns := range namespaces {
		f := informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = cfg.LabelSelector }),
			informers.WithTransform(trimPod))
		inf := f.Core().V1().Pods().Informer()
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { k.kick() },
			UpdateFunc: func(oldObj, newObj any) {
				// Status churn (restarts, probes) that changes no target
				// wakes nobody.
				o, ok1 := oldObj.(*corev1.Pod)
				n, ok2 := newObj.(*corev1.Pod)
				if !ok1 || !ok2 || !k.podTarget(o).equal(k.podTarget(n)) {
					k.kick()
				}
			},
			DeleteFunc: func(any) { k.kick() },
		}); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		if err := inf.SetWatchErrorHandlerWithContext(k.watchError); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		k.factories = append(k.factories, f)
		k.informers = append(k.informers, inf)
	}
	return k, nil
}

// trimPod drops what discovery never reads before a pod is cached.
func trimPod(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		p.ManagedFields = nil
	}
	return obj, nil
}

// run starts the informers, reports synced once their caches are filled,
// and returns when ctx is done and every informer goroutine has exited.
func (k *kubeSource) run(ctx context.Context, synced func()) {
	k.logger.Info("watching pods", zap.Strings("namespaces", k.namespaces), zap.String("label_selector", k.cfg.LabelSelector))
	for _, f := range k.factories {
		f.StartWithContext(ctx)
	}
	defer func() {
		for _, f := range k.factories {
			f.Shutdown()
		}
	}()
	for _, f := range k.factories {
		if res := f.WaitForCacheSyncWithContext(ctx); res.Err != nil {
			return // ctx done before the caches filled
		}
	}
	synced()
	<-ctx.Done()
}

// watchError counts and logs (once per distinct error) list/watch failures
// such as a missing RBAC permission; the informer retries with backoff. It
// replaces client-go's default handler, which would log every retry
// through klog.
func (k *kubeSource) watchError(_ context.Context, _ *cache.Reflector, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return // a watch ending or its resource version expiring is routine
	}
	k.failures.Inc()
	k.errMu.Lock()
	defer k.errMu.Unlock()
	if msg := err.Error(); msg != k.lastErr {
		k.lastErr = msg
		k.logger.Warn("kubernetes pod list/watch failed; retrying", zap.Error(err))
	}
}

// podResult is what one pod contributes: a target, or why it does not.
type podResult struct {
	target scrape.Target
	skip   string // empty when target is set
	warn   bool   // the skip is a configuration problem worth a log line
}

func (a podResult) equal(b podResult) bool {
	return a.skip == b.skip && sameTarget(a.target, b.target)
}

// podTarget applies the pod rules. Terminating and completed pods are
// dropped (a scale-down is not an outage); failed pods (evicted, exited for
// good) are kept, marked by their status, because losing a replica that
// way is an outage; pods without an IP cannot be scraped yet; pods that are
// not Ready are kept unless configured otherwise, so cold starts and crash
// loops stay visible.
func (k *kubeSource) podTarget(p *corev1.Pod) podResult {
	failed := p.Status.Phase == corev1.PodFailed
	switch {
	case !k.selector.Matches(labels.Set(p.Labels)):
		// A real watch sends DELETED when a relabelled pod leaves the
		// selector; checking here too keeps the cache honest either way.
		return podResult{skip: "labels no longer match the selector"}
	case p.DeletionTimestamp != nil:
		return podResult{skip: "terminating"}
	case p.Status.Phase == corev1.PodSucceeded:
		return podResult{skip: "completed"}
	case failed:
		// Never scraped (the scraper skips failed pods), so it needs no
		// IP; an address that cannot resolve keeps it that way.
	case p.Status.PodIP == "":
		return podResult{skip: "no pod IP yet"}
	case !*k.cfg.IncludeNotReady && !podReady(p):
		return podResult{skip: "not ready"}
	}
	port := k.portNumber
	if k.portName != "" {
		if port = namedPort(p, k.portName); port == 0 {
			return podResult{skip: fmt.Sprintf("no container declares a TCP port named %q", k.portName), warn: true}
		}
	}
	host := p.Status.PodIP
	if failed {
		host = failedPodHost
	}
	var ls map[string]string
	set := func(key, value string) {
		if ls == nil {
			ls = make(map[string]string, len(k.cfg.CopyLabels)+1)
		}
		ls[key] = value
	}
	for _, key := range k.cfg.CopyLabels {
		if v, ok := p.Labels[key]; ok {
			set(key, v)
		}
	}
	if v := p.Labels[k.cfg.ModelLabel]; v != "" {
		set(LabelModel, v)
	}
	set(LabelNamespace, p.Namespace)
	return podResult{target: scrape.Target{
		Name:   podTargetName(p.Namespace, p.Name),
		URL:    k.cfg.Scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + k.cfg.Path,
		Kind:   k.cfg.Kind,
		Labels: ls,
		Pod:    podStatus(p),
	}}
}

// failedPodHost is the address of a failed pod's target: its IP may be
// handed to another pod already, and .invalid never resolves (RFC 6761).
const failedPodHost = "failed-pod.invalid"

// podStatus is what the detectors need from a pod: whether it is starting
// (not Ready, young, no restarts), crashing (restarts, the last
// termination's reason and exit code) or gone (phase Failed: evicted).
func podStatus(p *corev1.Pod) *series.Pod {
	st := &series.Pod{
		Namespace: p.Namespace,
		Name:      p.Name,
		Phase:     string(p.Status.Phase),
		Reason:    p.Status.Reason,
		Message:   p.Status.Message,
		Ready:     podReady(p),
		Created:   p.CreationTimestamp.Time,
	}
	for _, c := range p.Status.ContainerStatuses {
		st.Restarts += int(c.RestartCount)
		if r := c.State.Running; r != nil && r.StartedAt.After(st.Started) {
			st.Started = r.StartedAt.Time
		}
		if w := c.State.Waiting; w != nil && st.Waiting == "" {
			st.Waiting = w.Reason
		}
		// The newest previous termination is the one a restart followed;
		// a container terminated now (a failed pod) counts as well.
		for _, term := range []*corev1.ContainerStateTerminated{c.LastTerminationState.Terminated, c.State.Terminated} {
			if term != nil && !term.FinishedAt.Time.Before(st.LastTermination.Finished) {
				st.LastTermination = series.Termination{Reason: term.Reason, ExitCode: int(term.ExitCode), Finished: term.FinishedAt.Time}
			}
		}
	}
	return st
}

// podTargetName is "<namespace>.<pod>". Target names hold no '/' (a
// replica behind a gateway is named target/worker downstream); namespaces
// are DNS labels without dots, so the first dot splits the name back.
func podTargetName(namespace, pod string) string { return namespace + "." + pod }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// namedPort finds a TCP container port by name; 0 when there is none.
func namedPort(p *corev1.Pod, name string) int {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == name && (cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP) {
				return int(cp.ContainerPort)
			}
		}
	}
	return 0
}

// targets computes every pod's contribution from the informer caches:
// the targets, sorted by name, and the pods skipped for a reason worth a
// warning (target name -> reason).
func (k *kubeSource) targets() ([]scrape.Target, map[string]string) {
	var out []scrape.Target
	var warn map[string]string
	for _, inf := range k.informers {
		for _, obj := range inf.GetStore().List() {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				continue
			}
			r := k.podTarget(p)
			switch {
			case r.skip == "":
				out = append(out, r.target)
			case r.warn:
				if warn == nil {
					warn = map[string]string{}
				}
				warn[podTargetName(p.Namespace, p.Name)] = r.skip
			}
		}
	}
	slices.SortFunc(out, func(a, b scrape.Target) int { return strings.Compare(a.Name, b.Name) })
	return out, warn
}
