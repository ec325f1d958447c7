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
	"time"
	"unicode/utf8"

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
	informers []cache.SharedIndexInformer // pods, one per namespace
	events    []cache.SharedIndexInformer // warning events about pods, one per namespace
	nodes     cache.SharedIndexInformer   // nil unless watch_nodes

	errMu   sync.Mutex
	lastErr map[string]string // last watch failure per resource, logged once per change
}

// eventsByPod indexes events by the "<namespace>/<name>" of their pod.
const eventsByPod = "pod"

// podEventSelector keeps the event watch to what pages use: warnings
// about pods.
const podEventSelector = "involvedObject.kind=Pod,type=Warning"

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
		lastErr:    map[string]string{},
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
		if err := inf.SetWatchErrorHandlerWithContext(k.watchError("pod")); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		k.factories = append(k.factories, f)
		k.informers = append(k.informers, inf)

		ef := informers.NewSharedInformerFactoryWithOptions(client, 0,
			informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = podEventSelector }),
			informers.WithTransform(trimEvent))
		einf := ef.Core().V1().Events().Informer()
		if err := k.watch(einf, "event", cache.Indexers{eventsByPod: podOfEvent}); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		k.factories = append(k.factories, ef)
		k.events = append(k.events, einf)
	}
	if *cfg.WatchNodes {
		nf := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimNode))
		k.nodes = nf.Core().V1().Nodes().Informer()
		if err := k.watch(k.nodes, "node", nil); err != nil {
			return nil, fmt.Errorf("nodes: %w", err)
		}
		k.factories = append(k.factories, nf)
	}
	return k, nil
}

// watch wires an informer whose objects only add to the pods' status
// (events, nodes): every change wakes the loop, which publishes only what
// changed a target; its failures are counted and logged per resource.
func (k *kubeSource) watch(inf cache.SharedIndexInformer, resource string, idx cache.Indexers) error {
	if idx != nil {
		if err := inf.AddIndexers(idx); err != nil {
			return err
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.kick() },
		UpdateFunc: func(_, _ any) { k.kick() },
		DeleteFunc: func(any) { k.kick() },
	}); err != nil {
		return err
	}
	return inf.SetWatchErrorHandlerWithContext(k.watchError(resource))
}

// podOfEvent is the eventsByPod index: the pod an event is about.
func podOfEvent(obj any) ([]string, error) {
	e, ok := obj.(*corev1.Event)
	if !ok || e.InvolvedObject.Kind != "Pod" {
		return nil, nil
	}
	return []string{e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name}, nil
}

// trimEvent keeps of an event what a page shows; the field selector is
// not honoured by every API (nor by fake clients), so other events are
// emptied here and never indexed.
func trimEvent(obj any) (any, error) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Pod" {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name, ResourceVersion: e.ResourceVersion}}, nil
	}
	e.ManagedFields = nil
	e.Message = truncate(e.Message)
	return e, nil
}

// trimNode keeps of a node its name, cordon and conditions: a node object
// carries its image list and labels, which can be large, and heartbeats
// that change every few seconds.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	conds := make([]corev1.NodeCondition, len(n.Status.Conditions))
	for i, c := range n.Status.Conditions {
		c.LastHeartbeatTime = metav1.Time{}
		conds[i] = c
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Spec:       corev1.NodeSpec{Unschedulable: n.Spec.Unschedulable},
		Status:     corev1.NodeStatus{Conditions: conds},
	}, nil
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

// watchError returns the handler of one resource's list/watch failures,
// such as a missing RBAC permission: it counts each and logs it once per
// distinct error; the informer retries with backoff. It replaces
// client-go's default handler, which would log every retry through klog.
func (k *kubeSource) watchError(resource string) cache.WatchErrorHandlerWithContext {
	msg := "kubernetes " + resource + " list/watch failed; retrying"
	return func(_ context.Context, _ *cache.Reflector, err error) {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return // a watch ending or its resource version expiring is routine
		}
		k.failures.Inc()
		k.errMu.Lock()
		defer k.errMu.Unlock()
		if text := err.Error(); text != k.lastErr[resource] {
			k.lastErr[resource] = text
			k.logger.Warn(msg, zap.Error(err))
		}
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
// way is an outage; pods the scheduler cannot place are kept too (unless
// include_not_ready is false), so a replica that never starts is seen;
// other pods without an IP cannot be scraped yet; pods that are not Ready
// are kept unless configured otherwise, so cold starts and crash loops
// stay visible.
func (k *kubeSource) podTarget(p *corev1.Pod) podResult {
	failed := p.Status.Phase == corev1.PodFailed
	unscheduled := p.Status.PodIP == "" && unschedulable(p) != ""
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
	case unscheduled && *k.cfg.IncludeNotReady:
		// No IP to scrape until it is placed; an address that cannot
		// resolve keeps every scrape failing (never reached: cold_start's).
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
	switch {
	case failed:
		host = failedPodHost
	case unscheduled:
		host = unscheduledPodHost
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
		Pod:    k.podStatus(p),
		// Shared by the pods' targets, so they share one client.
		HTTPClient: k.cfg.HTTPClient,
	}}
}

// failedPodHost is the address of a failed pod's target: its IP may be
// handed to another pod already, and .invalid never resolves (RFC 6761).
const failedPodHost = "failed-pod.invalid"

// unscheduledPodHost is the address of a pod the scheduler cannot place:
// it has no IP, and .invalid never resolves.
const unscheduledPodHost = "unscheduled-pod.invalid"

// unschedulable is the scheduler's message while it cannot place the pod
// (condition PodScheduled False, reason Unschedulable); "" otherwise.
func unschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			if c.Message == "" {
				return corev1.PodReasonUnschedulable
			}
			return truncate(c.Message)
		}
	}
	return ""
}

// podStatus is the pod's status with its node and its recent warning
// events, read from the other informers' caches.
func (k *kubeSource) podStatus(p *corev1.Pod) *series.Pod {
	st := podStatus(p)
	if k.nodes != nil && p.Spec.NodeName != "" {
		if obj, ok, _ := k.nodes.GetStore().GetByKey(p.Spec.NodeName); ok {
			if n, ok := obj.(*corev1.Node); ok {
				st.Node = nodeStatus(n)
			}
		}
	}
	for _, inf := range k.events {
		objs, _ := inf.GetIndexer().ByIndex(eventsByPod, p.Namespace+"/"+p.Name)
		for _, obj := range objs {
			if e, ok := obj.(*corev1.Event); ok && (e.InvolvedObject.UID == "" || e.InvolvedObject.UID == p.UID) {
				st.Events = append(st.Events, podEvent(e))
			}
		}
	}
	slices.SortFunc(st.Events, func(a, b series.PodEvent) int {
		if c := b.Last.Compare(a.Last); c != 0 {
			return c
		}
		return strings.Compare(a.Reason+a.Message, b.Reason+b.Message)
	})
	if len(st.Events) > series.MaxPodEvents {
		st.Events = slices.Clip(st.Events[:series.MaxPodEvents])
	}
	return st
}

// podEvent reads one event: its newest occurrence and how often it was
// seen, whether it is reported the old way (count, lastTimestamp) or as
// an event series (events.k8s.io).
func podEvent(e *corev1.Event) series.PodEvent {
	count, last := int(e.Count), e.LastTimestamp.Time
	if s := e.Series; s != nil {
		count, last = int(s.Count), s.LastObservedTime.Time
	}
	for _, t := range []time.Time{e.EventTime.Time, e.FirstTimestamp.Time, e.CreationTimestamp.Time} {
		if last.IsZero() {
			last = t
		}
	}
	return series.PodEvent{Reason: e.Reason, Message: e.Message, Count: max(count, 1), Last: last}
}

// nodeStatus is what the pages need from a node: its name, whether it is
// cordoned, and its conditions in an unhealthy state.
func nodeStatus(n *corev1.Node) *series.Node {
	st := &series.Node{Name: n.Name, Cordoned: n.Spec.Unschedulable}
	for _, typ := range []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure, corev1.NodeDiskPressure, corev1.NodePIDPressure} {
		for _, c := range n.Status.Conditions {
			if c.Type != typ || (typ == corev1.NodeReady) == (c.Status == corev1.ConditionTrue) {
				continue
			}
			st.Conditions = append(st.Conditions, series.NodeCondition{
				Type: string(c.Type), Status: string(c.Status), Reason: c.Reason,
				Message: truncate(c.Message), Since: c.LastTransitionTime.Time,
			})
		}
	}
	return st
}

// truncate cuts a Kubernetes message to series.MaxKubeMessage bytes, at a
// rune boundary, marking the cut.
func truncate(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= series.MaxKubeMessage {
		return s
	}
	cut := series.MaxKubeMessage - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// podStatus is what the detectors need from a pod: whether it is starting
// (not Ready, young, no restarts), crashing (restarts, the last
// termination's reason and exit code), gone (phase Failed: evicted), or
// held before it runs (unschedulable, an image it cannot pull).
func podStatus(p *corev1.Pod) *series.Pod {
	st := &series.Pod{
		Namespace:     p.Namespace,
		Name:          p.Name,
		Phase:         string(p.Status.Phase),
		Reason:        p.Status.Reason,
		Message:       p.Status.Message,
		Ready:         podReady(p),
		Created:       p.CreationTimestamp.Time,
		Unschedulable: unschedulable(p),
	}
	for _, c := range p.Status.ContainerStatuses {
		st.Restarts += int(c.RestartCount)
		if r := c.State.Running; r != nil && r.StartedAt.After(st.Started) {
			st.Started = r.StartedAt.Time
		}
		if w := c.State.Waiting; w != nil && st.Waiting == "" {
			st.Waiting, st.WaitingMessage, st.Image = w.Reason, truncate(w.Message), c.Image
		}
		// The newest previous termination is the one a restart followed;
		// a container terminated now (a failed pod) counts as well.
		for _, term := range []*corev1.ContainerStateTerminated{c.LastTerminationState.Terminated, c.State.Terminated} {
			if term != nil && !term.FinishedAt.Time.Before(st.LastTermination.Finished) {
				st.LastTermination = series.Termination{Reason: term.Reason, ExitCode: int(term.ExitCode), Finished: term.FinishedAt.Time}
			}
		}
	}
	// An init container that cannot start (its image, a crash) holds the
	// pod before any serving container waits for a reason of its own.
	for _, c := range p.Status.InitContainerStatuses {
		if w := c.State.Waiting; w != nil && w.Reason != podInitializing && (st.Waiting == "" || st.Waiting == podInitializing) {
			st.Waiting, st.WaitingMessage, st.Image = w.Reason, truncate(w.Message), c.Image
			break
		}
	}
	return st
}

// podInitializing is the reason the serving containers wait while init
// containers run.
const podInitializing = "PodInitializing"

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
