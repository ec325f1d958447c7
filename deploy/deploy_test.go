// Package deploy holds no code: its tests check the shipped manifests.
//
// Every YAML document under deploy/kubernetes, and every document the Helm
// chart renders (when CI points WATCHDOG_HELM_RENDERED at the output of
// `helm template`), is decoded strictly into its k8s.io/api type (or, for the
// Prometheus Operator's CRDs and kustomize, a local struct of the fields we
// use): unknown or duplicate fields are errors. Then the objects of one
// layout are checked against each other: selectors match pods, ports and
// volumes exist, RBAC is least privilege and names what the watchdog uses,
// the shipped watchdog.yaml parses with the daemon's own config loader, and
// the chart's rendered PrometheusRule carries the canonical rule file's
// groups. (The plain PrometheusRule is written from that file by
// `go generate ./...`.)
package deploy

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sglang-watchdog/sglang-watchdog/internal/config"
	"github.com/sglang-watchdog/sglang-watchdog/internal/leader"
)

// HelmRenderedEnv names a directory of `helm template` outputs, one file per
// values file (.ci/run renders them). Unset: the Helm tests skip.
const HelmRenderedEnv = "WATCHDOG_HELM_RENDERED"

const (
	chartDir      = "helm/sglang-watchdog"
	canonicalRule = chartDir + "/files/watchdog-rules.yaml"
	defaultJob    = "sglang-watchdog"
)

// ---------------------------------------------------------------------------
// Local types for the CRDs: only the fields the manifests use, so that
// anything else is an error (a typo such as `podMetricEndpoints` would
// otherwise be dropped silently by the API server's pruning).

type selectorOwner struct {
	JobLabel          string               `json:"jobLabel,omitempty"`
	Selector          metav1.LabelSelector `json:"selector"`
	NamespaceSelector *struct {
		Any        bool     `json:"any,omitempty"`
		MatchNames []string `json:"matchNames,omitempty"`
	} `json:"namespaceSelector,omitempty"`
}

type scrapeEndpoint struct {
	Port          string       `json:"port"`
	Path          string       `json:"path,omitempty"`
	Scheme        string       `json:"scheme,omitempty"`
	Interval      string       `json:"interval,omitempty"`
	ScrapeTimeout string       `json:"scrapeTimeout,omitempty"`
	Relabelings   []relabeling `json:"relabelings,omitempty"`
}

type relabeling struct {
	Action       string   `json:"action,omitempty"`
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Replacement  string   `json:"replacement,omitempty"`
}

type serviceMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		selectorOwner `json:",inline"`
		Endpoints     []scrapeEndpoint `json:"endpoints"`
	} `json:"spec"`
}

type podMonitor struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		selectorOwner       `json:",inline"`
		PodMetricsEndpoints []scrapeEndpoint `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type ruleGroup struct {
	Name     string          `json:"name"`
	Interval string          `json:"interval,omitempty"`
	Rules    []ruleGroupRule `json:"rules"`
}

type ruleGroupRule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

type kustomization struct {
	metav1.TypeMeta    `json:",inline"`
	Namespace          string   `json:"namespace,omitempty"`
	Resources          []string `json:"resources,omitempty"`
	Components         []string `json:"components,omitempty"`
	ConfigMapGenerator []struct {
		Name    string   `json:"name"`
		Files   []string `json:"files"`
		Options struct {
			DisableNameSuffixHash bool `json:"disableNameSuffixHash"`
		} `json:"options"`
	} `json:"configMapGenerator,omitempty"`
	Labels []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// newObject maps apiVersion/kind to the type a document must decode into.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "v1/Pod":
		return &corev1.Pod{}, true
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1/PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, true
	case "rbac.authorization.k8s.io/v1/Role":
		return &rbacv1.Role{}, true
	case "rbac.authorization.k8s.io/v1/RoleBinding":
		return &rbacv1.RoleBinding{}, true
	case "rbac.authorization.k8s.io/v1/ClusterRole":
		return &rbacv1.ClusterRole{}, true
	case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
		return &rbacv1.ClusterRoleBinding{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &serviceMonitor{}, true
	case "monitoring.coreos.com/v1/PodMonitor":
		return &podMonitor{}, true
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &prometheusRule{}, true
	case "kustomize.config.k8s.io/v1beta1/Kustomization":
		return &kustomization{}, true
	}
	return nil, false
}

// object is one decoded document.
type object struct {
	where string // file#index, for messages
	kind  string
	obj   any
}

func (o object) name() string {
	switch v := o.obj.(type) {
	case *kustomization:
		return "kustomization"
	case interface{ GetName() string }:
		return v.GetName()
	case *serviceMonitor:
		return v.Metadata.Name
	case *podMonitor:
		return v.Metadata.Name
	case *prometheusRule:
		return v.Metadata.Name
	}
	return ""
}

// strictDecode turns one YAML document into obj: duplicate keys, unknown
// fields and case mismatches are errors.
func strictDecode(doc []byte, obj any) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := sigsjson.UnmarshalStrict(js, obj, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// decodeFile decodes every document of a YAML stream.
func decodeFile(t *testing.T, path string) []object {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeDocs(t, path, data)
}

// decodeDocs decodes every document of a YAML stream read from path.
func decodeDocs(t *testing.T, path string, data []byte) []object {
	t.Helper()
	var out []object
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if isBlank(doc) {
			continue
		}
		where := fmt.Sprintf("%s#%d", path, i)
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		obj, ok := newObject(tm.APIVersion, tm.Kind)
		if !ok {
			t.Errorf("%s: unexpected apiVersion/kind %s %s (add it to newObject)", where, tm.APIVersion, tm.Kind)
			continue
		}
		if err := strictDecode(doc, obj); err != nil {
			t.Errorf("%s (%s): strict decoding: %v", where, tm.Kind, err)
			continue
		}
		o := object{where: where, kind: tm.Kind, obj: obj}
		if o.name() == "" {
			t.Errorf("%s: %s without metadata.name", where, tm.Kind)
		}
		out = append(out, o)
	}
	return out
}

// isBlank reports a document of comments and white space only.
func isBlank(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// layout is the objects deployed together: one kustomize directory, or one
// `helm template` output.
type layout struct {
	name    string
	dir     string // kustomize directory; "" for a Helm render
	objects []object
}

func of[T any](l layout) []T {
	var out []T
	for _, o := range l.objects {
		if v, ok := o.obj.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// plainLayouts are the kustomize directories as `kubectl apply -k` sees
// them: the rendered objects, plus the kustomization and the Secret
// template (which the render leaves out) as files.
func plainLayouts(t *testing.T) []layout {
	t.Helper()
	dirs, err := filepath.Glob("kubernetes/*/kustomization.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no kustomize layouts under deploy/kubernetes (%v)", err)
	}
	var out []layout
	for _, k := range dirs {
		dir := filepath.Dir(k)
		l := layout{name: dir, dir: dir}
		l.objects = append(l.objects, decodeDocs(t, dir+" (kustomize build)", kustomizeBuild(t, dir))...)
		l.objects = append(l.objects, decodeFile(t, k)...)
		if _, err := os.Stat(filepath.Join(dir, "secret.example.yaml")); err == nil {
			l.objects = append(l.objects, decodeFile(t, filepath.Join(dir, "secret.example.yaml"))...)
		}
		out = append(out, l)
	}
	return out
}

// ---------------------------------------------------------------------------
// Plain manifests: always checked.

func TestPlainManifestsDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if filepath.Base(f) == "watchdog.yaml" {
			continue
		}
		n += len(decodeFile(t, f))
	}
	if n < 20 {
		t.Errorf("only %d documents decoded under deploy/kubernetes; the glob is wrong", n)
	}
}

func TestStrictDecodingRejectsMistakes(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  any
		doc  string
	}{
		{"unknown field", &corev1.Service{}, "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {selectr: {a: b}}\n"},
		{"wrong case", &corev1.Service{}, "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {Type: ClusterIP}\n"},
		{"duplicate key", &corev1.Service{}, "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nmetadata: {name: y}\n"},
		{"wrong type", &appsv1.Deployment{}, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replicas: two}\n"},
		{"deep typo", &appsv1.Deployment{}, "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {template: {spec: {containers: [{name: c, readinesProbe: {}}]}}}\n"},
		{"crd unknown field", &podMonitor{}, "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata: {name: x}\nspec: {podMetricEndpoints: []}\n"},
		{"rule unknown field", &prometheusRule{}, "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec: {groups: [{name: g, rules: [{alert: A, expr: up, annotation: {}}]}]}\n"},
	} {
		if err := strictDecode([]byte(tc.doc), tc.obj); err == nil {
			t.Errorf("%s: decoded without error", tc.name)
		}
	}
	// And a correct document passes.
	if err := strictDecode([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {type: ClusterIP}\n"), &corev1.Service{}); err != nil {
		t.Errorf("valid Service: %v", err)
	}
}

// The downward-API check the layouts and renders go through catches a
// missing variable, a literal value and the wrong field.
func TestFromDownwardAPIRejectsMistakes(t *testing.T) {
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	for name, env := range map[string][]corev1.EnvVar{
		"missing":       {{Name: "POD_NAME", ValueFrom: field("metadata.name")}},
		"literal value": {{Name: "POD_IP", Value: "10.0.0.1"}},
		"wrong field":   {{Name: "POD_IP", ValueFrom: field("status.hostIP")}},
		"secret":        {{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "ip"}}}},
	} {
		byName := map[string]corev1.EnvVar{}
		for _, e := range env {
			byName[e.Name] = e
		}
		if err := fromDownwardAPI(byName, "POD_IP", "status.podIP"); err == nil {
			t.Errorf("%s: accepted %+v", name, env)
		}
	}
	ok := map[string]corev1.EnvVar{"POD_IP": {Name: "POD_IP", ValueFrom: field("status.podIP")}}
	if err := fromDownwardAPI(ok, "POD_IP", "status.podIP"); err != nil {
		t.Errorf("POD_IP from status.podIP: %v", err)
	}
}

func TestPlainLayouts(t *testing.T) {
	layouts := plainLayouts(t)
	var names []string
	for _, l := range layouts {
		names = append(names, l.name)
		t.Run(l.name, func(t *testing.T) {
			checkKustomization(t, l)
			checkLayout(t, l)
		})
	}
	for _, want := range []string{"kubernetes/central", "kubernetes/sidecar", "kubernetes/ha", "kubernetes/monitoring"} {
		if !slices.Contains(names, filepath.FromSlash(want)) {
			t.Errorf("layout %s missing (have %v)", want, names)
		}
	}
}

func checkKustomization(t *testing.T, l layout) {
	ks := of[*kustomization](l)
	if len(ks) != 1 {
		t.Fatalf("%d kustomizations", len(ks))
	}
	k := ks[0]
	for _, g := range k.ConfigMapGenerator {
		if !g.Options.DisableNameSuffixHash {
			t.Errorf("configMapGenerator %s: without disableNameSuffixHash every edit renames the ConfigMap and rolls the pods, losing their windows; the watchdog reloads the mounted file instead", g.Name)
		}
	}
	for _, r := range slices.Concat(k.Resources, k.Components) {
		if _, err := os.Stat(filepath.Join(l.dir, r)); err != nil {
			t.Errorf("resource %s: %v", r, err)
		}
		if strings.HasPrefix(filepath.Base(r), "secret") {
			t.Errorf("resource %s: Secrets stay out of the kustomization (apply -k would overwrite the real one)", r)
		}
	}
}

// The plain ServiceMonitor scrapes the Service of every layout that has
// one, and the PodMonitor the watchdog container of every layout.
func TestPlainMonitorsSelectEveryLayout(t *testing.T) {
	var mon layout
	var others []layout
	for _, l := range plainLayouts(t) {
		if filepath.Base(l.dir) == "monitoring" {
			mon = l
		} else {
			others = append(others, l)
		}
	}
	// podmonitor.yaml is the commented-out alternative to the ServiceMonitor.
	sms, pms := of[*serviceMonitor](mon), of[*podMonitor](layout{objects: decodeFile(t, "kubernetes/monitoring/podmonitor.yaml")})
	if len(sms) != 1 || len(pms) != 1 {
		t.Fatalf("monitoring layout: %d ServiceMonitors and %d PodMonitors, want one each", len(sms), len(pms))
	}
	smSel, err := metav1.LabelSelectorAsSelector(&sms[0].Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	pmSel, err := metav1.LabelSelectorAsSelector(&pms[0].Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pms[0].Spec.PodMetricsEndpoints[0].Relabelings, func(r relabeling) bool {
		return r.TargetLabel == "job" && r.Replacement == defaultJob
	}) {
		t.Errorf("PodMonitor does not set job=%s, which the rules select", defaultJob)
	}
	for _, l := range others {
		for _, s := range of[*corev1.Service](l) {
			if !smSel.Matches(labels.Set(s.Labels)) {
				t.Errorf("%s: the ServiceMonitor does not select Service %s (labels %v)", l.name, s.Name, s.Labels)
			}
			if s.Name != defaultJob {
				t.Errorf("%s: Service %s: the ServiceMonitor's job is the Service name, the rules expect %s", l.name, s.Name, defaultJob)
			}
			if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == sms[0].Spec.Endpoints[0].Port }) {
				t.Errorf("%s: Service %s has no port %s", l.name, s.Name, sms[0].Spec.Endpoints[0].Port)
			}
		}
		pods := podsSelectedBy(l, pmSel)
		if len(pods) == 0 {
			t.Errorf("%s: the PodMonitor selects no pod", l.name)
		}
		for _, p := range pods {
			if !hasContainerPort(p, pms[0].Spec.PodMetricsEndpoints[0].Port) {
				t.Errorf("%s: the PodMonitor's port %s is not in the pods", l.name, pms[0].Spec.PodMetricsEndpoints[0].Port)
			}
		}
	}
}

// TestHALayout checks what HA needs beyond what every layout needs.
func TestHALayout(t *testing.T) {
	for _, l := range plainLayouts(t) {
		if filepath.Base(l.dir) == "ha" {
			checkHA(t, l, leader.DefaultLeaseName, leader.DefaultStateConfigMap)
			return
		}
	}
	t.Fatal("no ha layout")
}

// The config each layout ships must load in the daemon: strict keys and
// Validate, as `watchdog run` would.
func TestShippedConfigsLoad(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*/watchdog.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no watchdog.yaml under deploy/kubernetes (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkConfig(t, f, string(b))
	}
}

func checkConfig(t *testing.T, where, data string) {
	t.Helper()
	cfg, err := config.Parse(config.Default(), []byte(data))
	if err != nil {
		t.Errorf("%s: the daemon rejects this watchdog.yaml: %v", where, err)
		return
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("%s: watchdog.yaml does not validate: %v", where, err)
	}
}

// Secret templates hold placeholders only, and every key a layout reads
// from the Secret is in its template.
func TestSecretExamples(t *testing.T) {
	for _, l := range plainLayouts(t) {
		secrets := of[*corev1.Secret](l)
		deps := of[*appsv1.Deployment](l)
		if len(deps) == 0 {
			continue
		}
		if len(secrets) != 1 {
			t.Errorf("%s: %d secret templates, want 1 (secret.example.yaml)", l.name, len(secrets))
			continue
		}
		s := secrets[0]
		for k, v := range s.StringData {
			if v != "REPLACE_ME" {
				t.Errorf("%s: secret.example.yaml key %s holds a value, not REPLACE_ME", l.name, k)
			}
		}
		if len(s.Data) > 0 {
			t.Errorf("%s: secret.example.yaml has data:; use stringData placeholders", l.name)
		}
		for _, d := range deps {
			for _, ref := range secretKeyRefs(d.Spec.Template.Spec) {
				if ref.name != s.Name || ref.optional {
					continue
				}
				if _, ok := s.StringData[ref.key]; !ok {
					t.Errorf("%s: deployment %s reads key %s of Secret %s, which secret.example.yaml lacks", l.name, d.Name, ref.key, s.Name)
				}
			}
		}
	}
}

type secretRef struct {
	name, key string
	optional  bool
}

func secretKeyRefs(p corev1.PodSpec) []secretRef {
	var out []secretRef
	for _, c := range p.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				r := e.ValueFrom.SecretKeyRef
				out = append(out, secretRef{r.Name, r.Key, r.Optional != nil && *r.Optional})
			}
		}
	}
	for _, v := range p.Volumes {
		if v.Secret != nil {
			for _, it := range v.Secret.Items {
				out = append(out, secretRef{v.Secret.SecretName, it.Key, v.Secret.Optional != nil && *v.Secret.Optional})
			}
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					for _, it := range src.Secret.Items {
						out = append(out, secretRef{src.Secret.Name, it.Key, src.Secret.Optional != nil && *src.Secret.Optional})
					}
				}
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Checks shared by plain layouts and Helm renders.

func checkLayout(t *testing.T, l layout) {
	t.Helper()
	deps := of[*appsv1.Deployment](l)
	for _, d := range deps {
		checkDeployment(t, l, d)
	}
	for _, s := range of[*corev1.Service](l) {
		pod := podsSelectedBy(l, labels.SelectorFromSet(s.Spec.Selector))
		if len(pod) == 0 {
			t.Errorf("Service %s selects no pod template (%v)", s.Name, s.Spec.Selector)
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.StrVal != "" && !hasContainerPort(pod[0], p.TargetPort.StrVal) {
				t.Errorf("Service %s: targetPort %s is no container port", s.Name, p.TargetPort.StrVal)
			}
		}
	}
	for _, pdb := range of[*policyv1.PodDisruptionBudget](l) {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Errorf("PDB %s: %v", pdb.Name, err)
			continue
		}
		var matched []*appsv1.Deployment
		for _, d := range deps {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				matched = append(matched, d)
			}
		}
		if len(matched) != 1 {
			t.Errorf("PDB %s matches %d Deployments, want 1", pdb.Name, len(matched))
			continue
		}
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 ||
			pdb.Spec.MinAvailable.IntValue() >= int(*matched[0].Spec.Replicas) {
			t.Errorf("PDB %s: minAvailable %v must be at least 1 and below the %d replicas, or no drain ever succeeds",
				pdb.Name, pdb.Spec.MinAvailable, *matched[0].Spec.Replicas)
		}
	}
	checkRBAC(t, l)
	for _, sm := range of[*serviceMonitor](l) {
		checkEndpoints(t, "ServiceMonitor "+sm.Metadata.Name, sm.Spec.Endpoints)
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Errorf("ServiceMonitor %s: %v", sm.Metadata.Name, err)
			continue
		}
		if l.dir != "" { // the plain monitors select Services of the other layouts
			continue
		}
		found := false
		for _, s := range of[*corev1.Service](l) {
			if sel.Matches(labels.Set(s.Labels)) {
				found = true
				for _, ep := range sm.Spec.Endpoints {
					if !slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
						t.Errorf("ServiceMonitor %s: Service %s has no port %s", sm.Metadata.Name, s.Name, ep.Port)
					}
				}
			}
		}
		if !found {
			t.Errorf("ServiceMonitor %s selects no Service", sm.Metadata.Name)
		}
	}
	for _, pm := range of[*podMonitor](l) {
		checkEndpoints(t, "PodMonitor "+pm.Metadata.Name, pm.Spec.PodMetricsEndpoints)
		if l.dir != "" {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
		if err != nil {
			t.Errorf("PodMonitor %s: %v", pm.Metadata.Name, err)
			continue
		}
		pods := podsSelectedBy(l, sel)
		if len(pods) == 0 {
			t.Errorf("PodMonitor %s selects no pod template", pm.Metadata.Name)
		}
		for _, p := range pods {
			for _, ep := range pm.Spec.PodMetricsEndpoints {
				if !hasContainerPort(p, ep.Port) {
					t.Errorf("PodMonitor %s: pods have no port %s", pm.Metadata.Name, ep.Port)
				}
			}
		}
	}
	for _, pr := range of[*prometheusRule](l) {
		checkRules(t, pr)
	}
}

// fromDownwardAPI checks that env var name is the pod field at path, and
// only that (a literal value beside the fieldRef is rejected by the API
// server; one without it would be the same for every pod).
func fromDownwardAPI(env map[string]corev1.EnvVar, name, path string) error {
	e, ok := env[name]
	if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
		return fmt.Errorf("env %s must come from the downward API (fieldRef.fieldPath: %s)", name, path)
	}
	return nil
}

// checkMemoryLimit: the watchdog container has a memory limit, and Go's
// soft limit (GOMEMLIMIT) is that limit, from the downward API, unless an
// override sets it to a literal value, so the garbage collector works
// harder before the kernel OOM-kills the container. env is the container's
// environment by name.
func checkMemoryLimit(c corev1.Container, env map[string]corev1.EnvVar) error {
	limit, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok || limit.IsZero() {
		return fmt.Errorf("the watchdog container has no memory limit")
	}
	e, ok := env["GOMEMLIMIT"]
	switch {
	case !ok:
		return fmt.Errorf("no GOMEMLIMIT: the Go runtime does not know the container's memory limit %s", limit.String())
	case e.ValueFrom == nil:
		if e.Value == "" {
			return fmt.Errorf("GOMEMLIMIT is empty")
		}
		return nil // set by hand (the chart's extraEnv)
	}
	ref := e.ValueFrom.ResourceFieldRef
	if e.Value != "" || ref == nil || ref.Resource != "limits.memory" || (ref.ContainerName != "" && ref.ContainerName != c.Name) ||
		(!ref.Divisor.IsZero() && ref.Divisor.Value() != 1) {
		return fmt.Errorf("GOMEMLIMIT must come from the downward API as the container's limits.memory in bytes, got %+v", e)
	}
	return nil
}

// envByName indexes a container's environment.
func envByName(c corev1.Container) map[string]corev1.EnvVar {
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	return env
}

func podsSelectedBy(l layout, sel labels.Selector) []corev1.PodSpec {
	var out []corev1.PodSpec
	for _, d := range of[*appsv1.Deployment](l) {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d.Spec.Template.Spec)
		}
	}
	return out
}

func hasContainerPort(p corev1.PodSpec, name string) bool {
	for _, c := range p.Containers {
		for _, cp := range c.Ports {
			if cp.Name == name {
				return true
			}
		}
	}
	return false
}

func checkEndpoints(t *testing.T, what string, eps []scrapeEndpoint) {
	t.Helper()
	if len(eps) == 0 {
		t.Errorf("%s: no endpoints", what)
	}
	for _, ep := range eps {
		if ep.Port != "http-metrics" {
			t.Errorf("%s: port %q, want the watchdog's http-metrics", what, ep.Port)
		}
		iv, err1 := time.ParseDuration(ep.Interval)
		to, err2 := time.ParseDuration(ep.ScrapeTimeout)
		if err1 != nil || err2 != nil || to >= iv {
			t.Errorf("%s: interval %q / scrapeTimeout %q: both durations, timeout below interval", what, ep.Interval, ep.ScrapeTimeout)
		}
	}
}

func checkDeployment(t *testing.T, l layout, d *appsv1.Deployment) {
	t.Helper()
	where := "Deployment " + d.Name
	if d.Spec.Selector == nil {
		t.Errorf("%s: no selector", where)
		return
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s: selector %v does not match its pod template's labels %v (%v)", where, d.Spec.Selector, d.Spec.Template.Labels, err)
	}
	p := d.Spec.Template.Spec
	volumes := map[string]corev1.Volume{}
	for _, v := range p.Volumes {
		volumes[v.Name] = v
	}
	var wd *corev1.Container
	for i, c := range p.Containers {
		if c.Name == "watchdog" {
			wd = &p.Containers[i]
		}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("%s: container %s mounts undefined volume %s", where, c.Name, m.Name)
			}
		}
		for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if probe != nil && probe.HTTPGet != nil && probe.HTTPGet.Port.StrVal != "" &&
				!slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == probe.HTTPGet.Port.StrVal }) {
				t.Errorf("%s: container %s probes undefined port %s", where, c.Name, probe.HTTPGet.Port.StrVal)
			}
		}
	}
	if wd == nil {
		t.Errorf("%s: no container named watchdog", where)
		return
	}
	// The watchdog container: non-root, read-only, probes on the right paths.
	sc := wd.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: watchdog container must run non-root, read-only, without privilege escalation, with ALL capabilities dropped", where)
	}
	if wd.LivenessProbe == nil || wd.LivenessProbe.HTTPGet == nil || wd.LivenessProbe.HTTPGet.Path != "/-/healthy" {
		t.Errorf("%s: watchdog liveness probe must be GET /-/healthy", where)
	}
	if len(p.Containers) > 1 { // a sidecar beside the serving container
		for _, err := range checkSidecarContainer(*wd) {
			t.Errorf("%s: %v", where, err)
		}
	} else {
		if wd.ReadinessProbe == nil || wd.ReadinessProbe.HTTPGet == nil || wd.ReadinessProbe.HTTPGet.Path != "/-/ready" {
			t.Errorf("%s: watchdog readiness probe must be GET /-/ready", where)
		}
		// Liveness waits for the server to answer; the backfill from
		// history comes after that.
		if sp := wd.StartupProbe; sp == nil || sp.HTTPGet == nil || sp.HTTPGet.Path != "/-/healthy" {
			t.Errorf("%s: watchdog startup probe must be GET /-/healthy", where)
		}
	}
	// A key missing from the Secret must not keep the pod in
	// ContainerCreating: the watchdog starts with that integration off.
	for _, ref := range secretKeyRefs(p) {
		if !ref.optional {
			t.Errorf("%s: key %s of Secret %s is not optional", where, ref.key, ref.name)
		}
	}
	if !hasContainerPort(corev1.PodSpec{Containers: []corev1.Container{*wd}}, "http-metrics") {
		t.Errorf("%s: watchdog container has no port http-metrics", where)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range wd.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("%s: env %s set twice", where, e.Name)
		}
		env[e.Name] = e
		// Credentials only through files.
		for _, secret := range []string{"SLACK_BOT_TOKEN", "SLACK_WEBHOOK_URL", "PAGERDUTY_ROUTING_KEY"} {
			if e.Name == secret {
				t.Errorf("%s: %s as an env value; use %s_FILE", where, secret, secret)
			}
		}
	}
	if la := env["WATCHDOG_LISTEN_ADDRESS"].Value; la != ":9402" {
		t.Errorf("%s: WATCHDOG_LISTEN_ADDRESS %q, want :9402 (the port every manifest uses)", where, la)
	}
	if err := checkMemoryLimit(*wd, env); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	// Without external_url, page links start with http://POD_IP:9402; the
	// host name the daemon falls back to is the pod name, which rarely
	// resolves where on-call opens a link.
	if err := fromDownwardAPI(env, "POD_IP", "status.podIP"); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	// Every *_FILE points into a mounted volume.
	for name, e := range env {
		if !strings.HasSuffix(name, "_FILE") && name != "WATCHDOG_CONFIG" && name != "WATCHDOG_STATE_DIR" {
			continue
		}
		if !slices.ContainsFunc(wd.VolumeMounts, func(m corev1.VolumeMount) bool {
			return strings.HasPrefix(e.Value, m.MountPath+"/") || e.Value == m.MountPath
		}) {
			t.Errorf("%s: %s=%s is not under any mount of the watchdog container", where, name, e.Value)
		}
	}
	// Every ConfigMap a pod reads exists in the layout.
	cms := map[string]bool{}
	for _, cm := range of[*corev1.ConfigMap](l) {
		cms[cm.Name] = true
	}
	for _, v := range p.Volumes {
		// An optional ConfigMap (an extraVolumes entry) may come from elsewhere.
		if v.ConfigMap != nil && !cms[v.ConfigMap.Name] && (v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional) {
			t.Errorf("%s: volume %s reads ConfigMap %s, which the layout does not create", where, v.Name, v.ConfigMap.Name)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil && !cms[s.ConfigMap.Name] {
					t.Errorf("%s: volume %s reads ConfigMap %s, which the layout does not create", where, v.Name, s.ConfigMap.Name)
				}
			}
		}
		if v.PersistentVolumeClaim != nil && !slices.ContainsFunc(of[*corev1.PersistentVolumeClaim](l), func(c *corev1.PersistentVolumeClaim) bool {
			return c.Name == v.PersistentVolumeClaim.ClaimName
		}) {
			t.Errorf("%s: volume %s claims PVC %s, which the layout does not create", where, v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
	// The ServiceAccount exists, and its token is mounted exactly when the
	// pod has RBAC to use (the API is otherwise out of reach).
	sa := p.ServiceAccountName
	isSA := func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == sa }
	hasRBAC := slices.ContainsFunc(of[*rbacv1.RoleBinding](l), func(rb *rbacv1.RoleBinding) bool {
		return slices.ContainsFunc(rb.Subjects, isSA)
	}) || slices.ContainsFunc(of[*rbacv1.ClusterRoleBinding](l), func(rb *rbacv1.ClusterRoleBinding) bool {
		return slices.ContainsFunc(rb.Subjects, isSA)
	})
	mounted := p.AutomountServiceAccountToken != nil && *p.AutomountServiceAccountToken
	if mounted != (hasRBAC && sa != "") {
		t.Errorf("%s: automountServiceAccountToken=%v but RoleBindings for %q: %v; mount the token only where RBAC grants API access", where, mounted, sa, hasRBAC)
	}
	if sa != "" && !slices.ContainsFunc(of[*corev1.ServiceAccount](l), func(s *corev1.ServiceAccount) bool { return s.Name == sa }) {
		t.Errorf("%s: ServiceAccount %s is not in the layout", where, sa)
	}
	// The watchdog's config, when the layout ships one.
	for _, cm := range of[*corev1.ConfigMap](l) {
		if data, ok := cm.Data["watchdog.yaml"]; ok {
			checkConfig(t, l.name+": ConfigMap "+cm.Name, data)
			checkNodeAccess(t, l, l.name+": ConfigMap "+cm.Name, data)
		}
	}
}

// checkNodeAccess: the config reads nodes (discovery.kubernetes.watch_nodes,
// default true) exactly when the layout grants them: without the grant
// every node list fails and the first target list waits for the sync
// timeout; a grant nobody uses is privilege for nothing.
func checkNodeAccess(t *testing.T, l layout, where, data string) {
	t.Helper()
	cfg, err := config.Parse(config.Default(), []byte(data))
	if err != nil {
		return // checkConfig reports it
	}
	k := cfg.Discovery.WithDefaults().Kubernetes
	reads := k != nil && *k.WatchNodes
	granted := false
	for _, rb := range of[*rbacv1.ClusterRoleBinding](l) {
		for _, cr := range of[*rbacv1.ClusterRole](l) {
			if cr.Name == rb.RoleRef.Name && slices.ContainsFunc(cr.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "nodes") }) {
				granted = true
			}
		}
	}
	if reads != granted {
		t.Errorf("%s: watch_nodes %v but a ClusterRole granting nodes: %v", where, reads, granted)
	}
}

// checkRBAC: namespaced except reading nodes, no wildcards, no Secrets,
// get/update limited by resourceNames, and bindings that point at what
// exists.
func checkRBAC(t *testing.T, l layout) {
	t.Helper()
	roles := map[string]*rbacv1.Role{}
	for _, r := range of[*rbacv1.Role](l) {
		roles[r.Name] = r
		for _, rule := range r.Rules {
			for _, s := range slices.Concat(rule.APIGroups, rule.Resources, rule.Verbs) {
				if s == "*" {
					t.Errorf("Role %s: wildcard in %+v", r.Name, rule)
				}
			}
			for _, res := range rule.Resources {
				if !slices.Contains([]string{"pods", "events", "leases", "configmaps"}, res) {
					t.Errorf("Role %s: access to %s; the watchdog needs pods, events, leases and configmaps only", r.Name, res)
				}
			}
			for _, v := range rule.Verbs {
				if !slices.Contains([]string{"get", "list", "watch", "create", "update"}, v) {
					t.Errorf("Role %s: verb %s is more than the watchdog uses", r.Name, v)
				}
			}
			writes := slices.Contains(rule.Verbs, "update") || slices.Contains(rule.Verbs, "create")
			if writes && (slices.Contains(rule.Resources, "pods") || slices.Contains(rule.Resources, "events")) {
				t.Errorf("Role %s: writes pods or events", r.Name)
			}
			if slices.Contains(rule.Verbs, "update") && len(rule.ResourceNames) == 0 {
				t.Errorf("Role %s: update on %v without resourceNames", r.Name, rule.Resources)
			}
			if slices.Contains(rule.Verbs, "create") && (len(rule.ResourceNames) > 0 || len(rule.Verbs) > 1) {
				t.Errorf("Role %s: create must be a rule of its own, without resourceNames (they never match a create)", r.Name)
			}
		}
	}
	// The one cluster-scoped grant: reading nodes, nothing else.
	clusterRoles := map[string]bool{}
	for _, r := range of[*rbacv1.ClusterRole](l) {
		clusterRoles[r.Name] = true
		for _, rule := range r.Rules {
			if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{"nodes"}) ||
				len(rule.ResourceNames) > 0 || len(rule.NonResourceURLs) > 0 ||
				!slices.Equal(slices.Sorted(slices.Values(rule.Verbs)), []string{"get", "list", "watch"}) {
				t.Errorf("ClusterRole %s: rule %+v; the only cluster-wide grant is get/list/watch on nodes", r.Name, rule)
			}
		}
	}
	for _, rb := range of[*rbacv1.ClusterRoleBinding](l) {
		if rb.RoleRef.Kind != "ClusterRole" || rb.RoleRef.APIGroup != rbacv1.GroupName || !clusterRoles[rb.RoleRef.Name] {
			t.Errorf("ClusterRoleBinding %s: binds %s %s %s, not the layout's ClusterRole", rb.Name, rb.RoleRef.APIGroup, rb.RoleRef.Kind, rb.RoleRef.Name)
		}
		for _, s := range rb.Subjects {
			if s.Kind != "ServiceAccount" || s.Namespace == "" || !slices.ContainsFunc(of[*corev1.ServiceAccount](l), func(sa *corev1.ServiceAccount) bool { return sa.Name == s.Name }) {
				t.Errorf("ClusterRoleBinding %s: subject %s %s/%s is not the layout's ServiceAccount with its namespace", rb.Name, s.Kind, s.Namespace, s.Name)
			}
		}
	}
	for _, rb := range of[*rbacv1.RoleBinding](l) {
		if rb.RoleRef.Kind != "Role" || rb.RoleRef.APIGroup != rbacv1.GroupName {
			t.Errorf("RoleBinding %s: binds %s %s; only namespaced Roles", rb.Name, rb.RoleRef.APIGroup, rb.RoleRef.Kind)
		}
		if _, ok := roles[rb.RoleRef.Name]; !ok {
			t.Errorf("RoleBinding %s: Role %s is not in the layout", rb.Name, rb.RoleRef.Name)
		}
		for _, s := range rb.Subjects {
			if s.Kind != "ServiceAccount" || !slices.ContainsFunc(of[*corev1.ServiceAccount](l), func(sa *corev1.ServiceAccount) bool { return sa.Name == s.Name }) {
				t.Errorf("RoleBinding %s: subject %s %s is not the layout's ServiceAccount", rb.Name, s.Kind, s.Name)
			}
		}
	}
}

// checkHA: the Deployment runs several copies apart, knows its pod name and
// namespace, and may use exactly the Lease and ConfigMap it is configured
// with.
func checkHA(t *testing.T, l layout, lease, stateCM string) {
	t.Helper()
	deps := of[*appsv1.Deployment](l)
	if len(deps) != 1 {
		t.Fatalf("%s: %d Deployments, want 1", l.name, len(deps))
	}
	d := deps[0]
	p := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("%s: HA Deployment with %v replicas", l.name, d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		t.Errorf("%s: Recreate stops every copy at once", l.name)
	}
	if p.Affinity == nil || p.Affinity.PodAntiAffinity == nil {
		t.Errorf("%s: no pod anti-affinity: both copies may land on one node", l.name)
	} else {
		aa := p.Affinity.PodAntiAffinity
		terms := aa.RequiredDuringSchedulingIgnoredDuringExecution
		for _, w := range aa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
		for _, term := range terms {
			sel, err := metav1.LabelSelectorAsSelector(term.LabelSelector)
			if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) || term.TopologyKey == "" {
				t.Errorf("%s: anti-affinity term %+v does not keep the copies apart", l.name, term)
			}
		}
	}
	if len(of[*policyv1.PodDisruptionBudget](l)) != 1 {
		t.Errorf("%s: want one PodDisruptionBudget", l.name)
	}
	env := map[string]corev1.EnvVar{}
	for _, c := range p.Containers {
		if c.Name == "watchdog" {
			for _, e := range c.Env {
				env[e.Name] = e
			}
		}
	}
	for name, path := range map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"} {
		if err := fromDownwardAPI(env, name, path); err != nil {
			t.Errorf("%s: %v", l.name, err)
		}
	}
	if _, ok := env["WATCHDOG_STATE_DIR"]; ok {
		t.Errorf("%s: WATCHDOG_STATE_DIR set: HA state lives in the ConfigMap", l.name)
	}
	// RBAC grants exactly what leader election and the state store need.
	grants := map[string][]string{} // "resource verb" -> resourceNames
	for _, r := range of[*rbacv1.Role](l) {
		for _, rule := range r.Rules {
			for _, res := range rule.Resources {
				for _, v := range rule.Verbs {
					grants[res+" "+v] = append(grants[res+" "+v], rule.ResourceNames...)
					if len(rule.ResourceNames) == 0 {
						grants[res+" "+v] = append(grants[res+" "+v], "*")
					}
				}
			}
		}
	}
	want := map[string][]string{
		"pods get": {"*"}, "pods list": {"*"}, "pods watch": {"*"},
		"events get": {"*"}, "events list": {"*"}, "events watch": {"*"},
		"leases get": {lease}, "leases update": {lease}, "leases create": {"*"},
		"configmaps get": {stateCM}, "configmaps update": {stateCM}, "configmaps create": {"*"},
	}
	for k := range grants {
		sort.Strings(grants[k])
		grants[k] = slices.Compact(grants[k])
	}
	if !reflect.DeepEqual(grants, want) {
		t.Errorf("%s: RBAC grants %v\nwant %v", l.name, grants, want)
	}
	// The config enables HA with the names RBAC allows.
	var raw string
	for _, cm := range of[*corev1.ConfigMap](l) {
		raw += cm.Data["watchdog.yaml"]
	}
	var cfg struct {
		HA struct {
			Enabled        bool   `json:"enabled"`
			LeaseName      string `json:"lease_name"`
			StateConfigMap string `json:"state_configmap"`
		} `json:"ha"`
	}
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("%s: watchdog.yaml: %v", l.name, err)
	}
	if !cfg.HA.Enabled {
		t.Errorf("%s: watchdog.yaml does not set ha.enabled", l.name)
	}
	if got := cmp.Or(cfg.HA.LeaseName, leader.DefaultLeaseName); got != lease {
		t.Errorf("%s: ha.lease_name %s, RBAC allows %s", l.name, got, lease)
	}
	if got := cmp.Or(cfg.HA.StateConfigMap, leader.DefaultStateConfigMap); got != stateCM {
		t.Errorf("%s: ha.state_configmap %s, RBAC allows %s", l.name, got, stateCM)
	}
}

// ---------------------------------------------------------------------------
// Rules.

func loadCanonicalGroups(t *testing.T) []ruleGroup {
	t.Helper()
	b, err := os.ReadFile(canonicalRule)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := strictDecode(b, &f); err != nil {
		t.Fatalf("%s: %v", canonicalRule, err)
	}
	return f.Groups
}

func checkRules(t *testing.T, pr *prometheusRule) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			anchors[strings.ToLower(strings.TrimSpace(h))] = true
		}
	}
	job := defaultJob
	if v := pr.Metadata.Labels["app.kubernetes.io/instance"]; v != "" {
		job = pr.Metadata.Name // the chart names the rule after the job
	}
	seen := map[string]bool{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			seen[r.Alert] = true
			where := "PrometheusRule " + pr.Metadata.Name + " alert " + r.Alert
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q", where, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s annotation", where, a)
				}
			}
			if u := r.Annotations["runbook_url"]; !strings.HasSuffix(u, "deploy/README.md#"+strings.ToLower(r.Alert)) || !anchors[strings.ToLower(r.Alert)] {
				t.Errorf("%s: runbook_url %q must point at a '### %s' section of deploy/README.md", where, u, r.Alert)
			}
			if !strings.Contains(r.Expr, fmt.Sprintf("job=%q", job)) || strings.Count(r.Expr, "job=") != strings.Count(r.Expr, fmt.Sprintf("job=%q", job)) {
				t.Errorf("%s: expression must select job=%q everywhere: %s", where, job, r.Expr)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for: %v", where, err)
				}
			}
		}
	}
	for _, a := range []string{"WatchdogDown", "WatchdogScrapesFailing", "WatchdogTargetsDown", "WatchdogNotificationsFailing",
		"WatchdogNotificationsQueuedTooLong", "WatchdogNoLeader", "WatchdogHeartbeatMissing", "WatchdogConfigReloadFailed"} {
		if !seen[a] {
			t.Errorf("PrometheusRule %s: no alert %s", pr.Metadata.Name, a)
		}
	}
}

// renameJob is what the chart does to the canonical rule file: every
// job="sglang-watchdog" becomes the release's job.
func renameJob(groups []ruleGroup, job string) []ruleGroup {
	from, to := fmt.Sprintf("job=%q", defaultJob), fmt.Sprintf("job=%q", job)
	for gi := range groups {
		for ri := range groups[gi].Rules {
			r := &groups[gi].Rules[ri]
			r.Expr = strings.ReplaceAll(r.Expr, from, to)
			for k, v := range r.Annotations {
				r.Annotations[k] = strings.ReplaceAll(v, from, to)
			}
		}
	}
	return groups
}

// tuneRules is what monitoring.rules.disabled and additionalRuleLabels do
// to the rule groups: one alert left out, labels added to every alert.
func tuneRules(groups []ruleGroup, disabled string, extra map[string]string) []ruleGroup {
	for gi := range groups {
		g := &groups[gi]
		g.Rules = slices.DeleteFunc(g.Rules, func(r ruleGroupRule) bool { return r.Alert == disabled })
		for ri := range g.Rules {
			if g.Rules[ri].Alert == "" {
				continue
			}
			labels := map[string]string{}
			for k, v := range extra {
				labels[k] = v
			}
			for k, v := range g.Rules[ri].Labels {
				labels[k] = v
			}
			g.Rules[ri].Labels = labels
		}
	}
	return groups
}

// ---------------------------------------------------------------------------
// Helm renders (CI: .ci/run renders the chart for every values file).

func helmRenders(t *testing.T) map[string]string {
	t.Helper()
	dir := os.Getenv(HelmRenderedEnv)
	if dir == "" {
		t.Skipf("%s not set: run .ci/run (it renders the chart with helm) to check the chart", HelmRenderedEnv)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		out[strings.TrimSuffix(filepath.Base(f), ".yaml")] = f
	}
	// One render per values file, at least.
	values, _ := filepath.Glob(filepath.Join(chartDir, "values-*.yaml"))
	for _, v := range values {
		name := strings.TrimSuffix(filepath.Base(v), ".yaml")
		if _, ok := out[name]; !ok {
			t.Errorf("%s: no render %s.yaml for %s", dir, name, v)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s=%s holds no rendered *.yaml", HelmRenderedEnv, dir)
	}
	return out
}

// checkHelmTest: a layout with a Service has one `helm test` Pod that asks
// the Service's /-/ready with the watchdog's own image, selected by neither
// the Service nor the PodDisruptionBudget; the sidecar layout has none.
func checkHelmTest(t *testing.T, l layout, mode string, dep *appsv1.Deployment) {
	t.Helper()
	pods := of[*corev1.Pod](l)
	svcs := of[*corev1.Service](l)
	if mode == "sidecar" {
		if len(pods) != 0 {
			t.Errorf("sidecar render has %d Pods; it has no Service to test", len(pods))
		}
		return
	}
	if len(pods) != 1 || len(svcs) != 1 {
		t.Fatalf("%d Pods and %d Services, want one helm test Pod for the one Service", len(pods), len(svcs))
	}
	p, svc := pods[0], svcs[0]
	if p.Annotations["helm.sh/hook"] != "test" || p.Spec.RestartPolicy != corev1.RestartPolicyNever || len(p.Spec.Containers) != 1 {
		t.Fatalf("test Pod %s: hook %q, restart %q, %d containers", p.Name, p.Annotations["helm.sh/hook"], p.Spec.RestartPolicy, len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	want := []string{"check", "--timeout", "30s", "ready", fmt.Sprintf("http://%s:%d", svc.Name, svc.Spec.Ports[0].Port)}
	if !slices.Equal(c.Args, want) {
		t.Errorf("test Pod args %q, want %q", c.Args, want)
	}
	for _, w := range dep.Spec.Template.Spec.Containers {
		if w.Name == "watchdog" && w.Image != c.Image {
			t.Errorf("test Pod image %s, want the watchdog's %s", c.Image, w.Image)
		}
	}
	if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) {
		t.Errorf("the Service selects the test Pod (%v)", p.Labels)
	}
	for _, pdb := range of[*policyv1.PodDisruptionBudget](l) {
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && sel.Matches(labels.Set(p.Labels)) {
			t.Errorf("PodDisruptionBudget %s selects the test Pod", pdb.Name)
		}
	}
}

func TestHelmRenders(t *testing.T) {
	for name, f := range helmRenders(t) {
		t.Run(name, func(t *testing.T) {
			l := layout{name: name, objects: decodeFile(t, f)}
			if len(l.objects) == 0 {
				t.Fatal("empty render")
			}
			checkLayout(t, l)
			// A Secret only when the values ask for one (the extra-*-secret
			// render sets secrets.create).
			if got, want := len(of[*corev1.Secret](l)) > 0, strings.Contains(name, "secret"); got != want {
				t.Errorf("renders a Secret: %v, want %v; credentials belong in an existing Secret unless secrets.create", got, want)
			}
			deps := of[*appsv1.Deployment](l)
			if len(deps) != 1 {
				t.Fatalf("%d Deployments", len(deps))
			}
			job := deps[0].Name
			mode := deps[0].Spec.Template.Labels["app.kubernetes.io/component"]
			// image.digest (set in the extra-tuned render) pins the image;
			// without it, the tag.
			for _, c := range deps[0].Spec.Template.Spec.Containers {
				if c.Name != "watchdog" {
					continue
				}
				const pinned = "ghcr.io/sglang-watchdog/sglang-watchdog@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
				if tuned := strings.Contains(name, "tuned"); tuned && c.Image != pinned {
					t.Errorf("watchdog image %q, want it pinned by image.digest: %s", c.Image, pinned)
				} else if !tuned && !strings.HasPrefix(c.Image, "ghcr.io/sglang-watchdog/sglang-watchdog:") {
					t.Errorf("watchdog image %q, want the repository and a tag", c.Image)
				}
				if env := envByName(c); strings.Contains(name, "tuned") && env["GOMEMLIMIT"].Value != "460MiB" {
					t.Errorf("GOMEMLIMIT %+v: extraEnv's value must win over the derived one", env["GOMEMLIMIT"])
				}
			}
			// Config edits reload in place; only rollOnConfigChange (set in
			// the extra-tuned render) rolls the pods, losing their windows.
			_, rolls := deps[0].Spec.Template.Annotations["checksum/config"]
			if want := strings.Contains(name, "tuned"); rolls != want {
				t.Errorf("pod template has checksum/config: %v, want %v (rollOnConfigChange is off by default)", rolls, want)
			}
			checkHelmTest(t, l, mode, deps[0])
			switch mode {
			case "ha":
				checkHA(t, l, job, job+"-state")
			case "sidecar":
				if !slices.ContainsFunc(deps[0].Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "sglang" }) {
					t.Error("sidecar render without the sglang container")
				}
				if len(of[*serviceMonitor](l)) > 0 {
					t.Error("sidecar render with a ServiceMonitor: there is no Service; use a PodMonitor")
				}
				// The pod is the serving pod: an fsGroup would chown its model
				// volumes, a runAsUser change its server's user.
				p := deps[0].Spec.Template.Spec
				if p.SecurityContext != nil && !reflect.DeepEqual(*p.SecurityContext, corev1.PodSecurityContext{}) {
					t.Errorf("sidecar render sets the serving pod's securityContext: %+v", p.SecurityContext)
				}
				for _, c := range p.Containers {
					if c.Name != "watchdog" && c.SecurityContext != nil {
						t.Errorf("sidecar render sets container %s's securityContext", c.Name)
					}
				}
			case "central":
				if *deps[0].Spec.Replicas != 1 || deps[0].Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
					t.Error("single mode must be one replica with strategy Recreate")
				}
			default:
				t.Errorf("unknown component %q", mode)
			}
			// The PrometheusRule is the canonical file with the job renamed
			// (the extra-tuned render disables WatchdogStateSaveFailing and
			// adds team=llm to every alert).
			for _, pr := range of[*prometheusRule](l) {
				renamed := renameJob(loadCanonicalGroups(t), job)
				if strings.Contains(name, "tuned") {
					renamed = tuneRules(renamed, "WatchdogStateSaveFailing", map[string]string{"team": "llm"})
				}
				if !reflect.DeepEqual(pr.Spec.Groups, renamed) {
					t.Errorf("PrometheusRule %s differs from %s with job %q", pr.Metadata.Name, canonicalRule, job)
				}
			}
			// On OpenShift the platform assigns the UID and groups: the
			// extra-openshift render sets none.
			if strings.Contains(name, "openshift") {
				p := deps[0].Spec.Template.Spec
				if sc := p.SecurityContext; sc == nil || sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.FSGroup != nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
					t.Errorf("OpenShift render: pod securityContext %+v, want runAsNonRoot without fixed IDs", sc)
				}
				for _, c := range p.Containers {
					if sc := c.SecurityContext; sc != nil && (sc.RunAsUser != nil || sc.RunAsGroup != nil) {
						t.Errorf("OpenShift render: container %s runs as a fixed UID/GID", c.Name)
					}
				}
			}
			// The monitors give the job the rules select.
			for _, pm := range of[*podMonitor](l) {
				for _, ep := range pm.Spec.PodMetricsEndpoints {
					if !slices.ContainsFunc(ep.Relabelings, func(r relabeling) bool {
						return r.TargetLabel == "job" && r.Replacement == job
					}) {
						t.Errorf("PodMonitor %s does not set job=%s", pm.Metadata.Name, job)
					}
				}
			}
			for _, s := range of[*corev1.Service](l) {
				if s.Name != job {
					t.Errorf("Service %s: the ServiceMonitor's job is the Service name, and the rules expect %s", s.Name, job)
				}
			}
		})
	}
}
