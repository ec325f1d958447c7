package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizeBuild renders a kustomization directory as `kubectl apply -k`
// (`kustomize build`) does.
func kustomizeBuild(t *testing.T, dir string) []byte {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return out
}

// podSpecPaths is where each workload kind keeps the pod the sidecar joins.
var podSpecPaths = map[string][]string{
	"Deployment":       {"spec", "template", "spec"},
	"LeaderWorkerSet":  {"spec", "leaderWorkerTemplate", "leaderTemplate", "spec"},
	"InferenceService": {"spec", "predictor"},
}

// podSpecs returns, by object name, the pod spec of every workload in a
// YAML stream, decoded strictly into corev1.PodSpec (KServe's predictor
// fields that are not a pod's are dropped first).
func podSpecs(t *testing.T, where string, data []byte) map[string]corev1.PodSpec {
	t.Helper()
	out := map[string]corev1.PodSpec{}
	for i, doc := range strings.Split(string(data), "\n---\n") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%s#%d: %v", where, i, err)
		}
		path, ok := podSpecPaths[u.GetKind()]
		if !ok {
			continue
		}
		m, found, err := unstructured.NestedMap(u.Object, path...)
		if err != nil || !found {
			t.Fatalf("%s: %s %s has no %s (%v)", where, u.GetKind(), u.GetName(), strings.Join(path, "."), err)
		}
		for _, k := range []string{"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric"} {
			delete(m, k)
		}
		js, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var p corev1.PodSpec
		if err := strictDecode(js, &p); err != nil {
			t.Fatalf("%s: %s %s: pod spec: %v", where, u.GetKind(), u.GetName(), err)
		}
		out[u.GetKind()+"/"+u.GetName()] = p
	}
	return out
}

// checkSidecarContainer: nothing in the watchdog container may gate the
// pod's readiness.
func checkSidecarContainer(c corev1.Container) []error {
	var errs []error
	if c.ReadinessProbe != nil {
		errs = append(errs, fmt.Errorf("the watchdog sidecar has a readiness probe: a watchdog that is not ready takes the replica out of its Service"))
	}
	if c.StartupProbe != nil {
		errs = append(errs, fmt.Errorf("the watchdog sidecar has a startup probe: the pod is not ready until it passes"))
	}
	return errs
}

// checkSidecarPod compares a pod with the sidecar added to the pod it was
// added to: the only differences allowed are the watchdog container and
// its volumes; the pod's securityContext and the other containers are the
// workload's own.
func checkSidecarPod(orig, patched corev1.PodSpec) []error {
	var errs []error
	wi := slices.IndexFunc(patched.Containers, func(c corev1.Container) bool { return c.Name == "watchdog" })
	if wi < 0 {
		return []error{fmt.Errorf("no watchdog container")}
	}
	errs = append(errs, checkSidecarContainer(patched.Containers[wi])...)
	for _, ref := range secretKeyRefs(patched) {
		if !ref.optional {
			errs = append(errs, fmt.Errorf("key %s of Secret %s is not optional: without it the pod stays in ContainerCreating", ref.key, ref.name))
		}
	}
	if !reflect.DeepEqual(orig.SecurityContext, patched.SecurityContext) {
		errs = append(errs, fmt.Errorf("pod securityContext changed from %+v to %+v", orig.SecurityContext, patched.SecurityContext))
	}
	rest := patched
	rest.Containers = slices.Delete(slices.Clone(patched.Containers), wi, wi+1)
	rest.Volumes = slices.DeleteFunc(slices.Clone(patched.Volumes), func(v corev1.Volume) bool { return strings.HasPrefix(v.Name, "watchdog-") })
	if len(rest.Volumes) == 0 {
		rest.Volumes = nil
	}
	if !reflect.DeepEqual(orig, rest) {
		errs = append(errs, fmt.Errorf("the sidecar changed the pod beyond its container and volumes:\n got  %+v\n want %+v", rest, orig))
	}
	return errs
}

// The component adds the watchdog to a Deployment, a LeaderWorkerSet and a
// KServe InferenceService without touching anything of theirs.
func TestSidecarComponent(t *testing.T) {
	for _, tc := range []struct{ dir, input, workload string }{
		{"kubernetes/sidecar", "kubernetes/sidecar/deployment.yaml", "Deployment/sglang"},
		{"kubernetes/components/examples/leaderworkerset", "kubernetes/components/examples/leaderworkerset/leaderworkerset.yaml", "LeaderWorkerSet/sglang"},
		{"kubernetes/components/examples/inferenceservice", "kubernetes/components/examples/inferenceservice/inferenceservice.yaml", "InferenceService/sglang"},
	} {
		t.Run(filepath.Base(tc.dir), func(t *testing.T) {
			rendered := kustomizeBuild(t, tc.dir)
			input, err := os.ReadFile(tc.input)
			if err != nil {
				t.Fatal(err)
			}
			orig := podSpecs(t, tc.input, input)[tc.workload]
			got, ok := podSpecs(t, tc.dir, rendered)[tc.workload]
			if !ok {
				t.Fatalf("kustomize build %s renders no %s", tc.dir, tc.workload)
			}
			for _, err := range checkSidecarPod(orig, got) {
				t.Error(err)
			}
			wd := got.Containers[slices.IndexFunc(got.Containers, func(c corev1.Container) bool { return c.Name == "watchdog" })]
			if err := checkMemoryLimit(wd, envByName(wd)); err != nil {
				t.Error(err)
			}
			// The ConfigMap the sidecar reads is rendered, under the name
			// it mounts (no hash suffix: edits reload, they do not roll).
			cms := map[string]string{}
			for _, o := range decodeDocs(t, tc.dir, renderedWithout(rendered, "LeaderWorkerSet", "InferenceService")) {
				if cm, ok := o.obj.(*corev1.ConfigMap); ok {
					cms[cm.Name] = cm.Data["watchdog.yaml"]
				}
			}
			for _, v := range got.Volumes {
				if v.Projected == nil {
					continue
				}
				for _, src := range v.Projected.Sources {
					if src.ConfigMap != nil {
						data, ok := cms[src.ConfigMap.Name]
						if !ok {
							t.Errorf("volume %s reads ConfigMap %s, which the build does not render (have %v)", v.Name, src.ConfigMap.Name, cms)
						}
						checkConfig(t, tc.dir+": ConfigMap "+src.ConfigMap.Name, data)
					}
				}
			}
		})
	}
}

// renderedWithout drops the documents of the given kinds (those without
// k8s.io/api types) from a YAML stream.
func renderedWithout(data []byte, kinds ...string) []byte {
	var keep []string
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var tm struct{ Kind string }
		if yaml.Unmarshal([]byte(doc), &tm) == nil && slices.Contains(kinds, tm.Kind) {
			continue
		}
		keep = append(keep, doc)
	}
	return []byte(strings.Join(keep, "\n---\n"))
}

// The comparison catches each way of damaging the serving pod.
func TestCheckSidecarPodCatchesDamage(t *testing.T) {
	rendered := kustomizeBuild(t, "kubernetes/sidecar")
	input, err := os.ReadFile("kubernetes/sidecar/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	orig := podSpecs(t, "input", input)["Deployment/sglang"]
	good := podSpecs(t, "rendered", rendered)["Deployment/sglang"]
	if errs := checkSidecarPod(orig, good); len(errs) > 0 {
		t.Fatalf("the shipped sidecar fails: %v", errs)
	}
	watchdog := func(p *corev1.PodSpec) *corev1.Container {
		return &p.Containers[slices.IndexFunc(p.Containers, func(c corev1.Container) bool { return c.Name == "watchdog" })]
	}
	for name, damage := range map[string]func(p *corev1.PodSpec){
		"readiness probe": func(p *corev1.PodSpec) { watchdog(p).ReadinessProbe = watchdog(p).LivenessProbe.DeepCopy() },
		"startup probe":   func(p *corev1.PodSpec) { watchdog(p).StartupProbe = watchdog(p).LivenessProbe.DeepCopy() },
		"required secret key": func(p *corev1.PodSpec) {
			for i := range watchdog(p).Env {
				if r := watchdog(p).Env[i].ValueFrom; r != nil && r.SecretKeyRef != nil {
					r.SecretKeyRef.Optional = nil
				}
			}
		},
		"required secret volume": func(p *corev1.PodSpec) {
			for _, v := range p.Volumes {
				if v.Projected != nil {
					for _, src := range v.Projected.Sources {
						if src.Secret != nil {
							src.Secret.Optional = nil
						}
					}
				}
			}
		},
		"pod fsGroup": func(p *corev1.PodSpec) {
			g := int64(65532)
			p.SecurityContext = &corev1.PodSecurityContext{FSGroup: &g}
		},
		"serving container changed": func(p *corev1.PodSpec) {
			serving := &p.Containers[slices.IndexFunc(p.Containers, func(c corev1.Container) bool { return c.Name == "sglang" })]
			if serving.ReadinessProbe == nil {
				t.Fatal("the example's serving container has no readiness probe to remove")
			}
			serving.ReadinessProbe = nil
		},
		"pod field changed": func(p *corev1.PodSpec) { p.EnableServiceLinks = nil },
	} {
		// Decoded afresh for each damage, so none can leak into the next.
		p := podSpecs(t, "rendered", rendered)["Deployment/sglang"]
		damage(&p)
		if errs := checkSidecarPod(orig, p); len(errs) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

// The digest line each layout's kustomization offers pins the watchdog's
// image by digest, in every layout and on every workload the
// sidecar component patches.
func TestKustomizeImageDigestPins(t *testing.T) {
	const digest = "sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, dir := range []string{"kubernetes/central", "kubernetes/ha", "kubernetes/sidecar",
		"kubernetes/components/examples/leaderworkerset", "kubernetes/components/examples/inferenceservice"} {
		t.Run(dir, func(t *testing.T) {
			// The layouts in memory, with the digest line of dir's
			// kustomization uncommented as an operator would.
			fs := filesys.MakeFsInMemory()
			if err := filepath.WalkDir("kubernetes", func(path string, d os.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if path == filepath.Join(dir, "kustomization.yaml") {
					pinned := strings.Replace(string(data), "# digest: sha256:<64 hex digits>", "digest: "+digest+" #", 1)
					if pinned == string(data) {
						t.Errorf("%s offers no digest line", path)
					}
					data = []byte(pinned)
				}
				return fs.WriteFile(filepath.Join("/", path), data)
			}); err != nil {
				t.Fatal(err)
			}
			m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, filepath.Join("/", dir))
			if err != nil {
				t.Fatalf("kustomize build: %v", err)
			}
			out, err := m.AsYaml()
			if err != nil {
				t.Fatal(err)
			}
			pods := podSpecs(t, dir, out)
			if len(pods) == 0 {
				t.Fatal("no workload rendered")
			}
			for name, p := range pods {
				for _, c := range p.Containers {
					// The tag may stay beside the digest (repo:tag@digest); the
					// digest is what is pulled.
					if c.Name == "watchdog" && (!strings.HasPrefix(c.Image, "registry.example.com/sglang-watchdog") || !strings.HasSuffix(c.Image, "@"+digest)) {
						t.Errorf("%s: watchdog image %q, want it pinned by digest", name, c.Image)
					}
				}
			}
		})
	}
}
