package discovery

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// decode reads a YAML document the way the main config does: strictly.
func decode(t *testing.T, data []byte) (Config, error) {
	t.Helper()
	var doc struct {
		Discovery Config `yaml:"discovery"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&doc)
	return doc.Discovery, err
}

func TestConfigExampleDecodesAndValidates(t *testing.T) {
	data, err := os.ReadFile("testdata/discovery.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := decode(t, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate("discovery"); err != nil {
		t.Fatalf("the documented example is invalid: %v", err)
	}
	if !cfg.Enabled() {
		t.Error("Enabled() = false with dns and kubernetes set")
	}
	k := cfg.Kubernetes
	if k == nil || k.Port != "http" || !slices.Equal(k.Namespaces, []string{"llm", "llm-canary"}) || k.IncludeNotReady == nil || !*k.IncludeNotReady {
		t.Errorf("kubernetes = %+v", k)
	}
	if cfg.DNS[0].RefreshInterval != 30*time.Second || cfg.DNS[0].Labels["model"] != "llama-3-70b" {
		t.Errorf("dns[0] = %+v", cfg.DNS[0])
	}
	if f := cfg.FileSD; len(f) != 1 || f[0].RefreshInterval != time.Minute || f[0].HTTPClient == nil || f[0].HTTPClient.BasicAuth == nil ||
		!f[0].HTTPClient.FollowRedirects {
		t.Errorf("file_sd = %+v: want the settings over the client defaults", f)
	}
	if cfg.Shard != (ShardConfig{Total: 3, Index: 1, By: ShardByModel}) {
		t.Errorf("shard = %+v", cfg.Shard)
	}
}

// The package comment shows the same example; keep them in step.
func TestConfigExampleMatchesPackageDoc(t *testing.T) {
	src, err := os.ReadFile("discovery.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"name_prefix", "refresh_interval", "kubeconfig", "namespaces", "label_selector",
		"copy_labels", "model_label", "include_not_ready", "watch_nodes", "http_client", "total", "index", "by"} {
		if !bytes.Contains(src, []byte("//\t    "+key+":")) && !bytes.Contains(src, []byte("//\t      "+key+":")) {
			t.Errorf("package doc lacks %s", key)
		}
	}
}

func TestConfigPortAsNumberOrName(t *testing.T) {
	for doc, want := range map[string]string{
		"discovery: {kubernetes: {port: 8080}}": "8080",
		"discovery: {kubernetes: {port: http}}": "http",
		"discovery: {kubernetes: {}}":           "",
	} {
		cfg, err := decode(t, []byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if cfg.Kubernetes == nil || cfg.Kubernetes.Port != want {
			t.Errorf("%s: port %+v, want %q", doc, cfg.Kubernetes, want)
		}
		if err := cfg.Validate("discovery"); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestConfigUnknownKeyRejected(t *testing.T) {
	_, err := decode(t, []byte("discovery:\n  kubernetes:\n    label_selectr: app=sglang\n"))
	if err == nil || !strings.Contains(err.Error(), "label_selectr") {
		t.Errorf("unknown key: err = %v", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	if err := (Config{}).Validate("discovery"); err != nil {
		t.Errorf("zero config: %v", err)
	}
	if (Config{}).Enabled() {
		t.Error("zero config enabled")
	}
	cfg, err := decode(t, []byte("discovery:\n  dns: [{names: [sglang.llm.svc]}]\n  kubernetes: {}\n  file_sd: [{files: [/t/*.json]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	d := cfg.DNS[0]
	if d.Port != 30000 || d.Scheme != "http" || d.Path != "/metrics" || d.Kind != "engine" || d.RefreshInterval != 30*time.Second {
		t.Errorf("dns defaults: %+v", d)
	}
	k := cfg.Kubernetes
	if k.Port != "30000" || k.Scheme != "http" || k.Path != "/metrics" || k.Kind != "engine" || k.ModelLabel != "model" ||
		k.IncludeNotReady == nil || !*k.IncludeNotReady || k.WatchNodes == nil || !*k.WatchNodes || !slices.Equal(k.CopyLabels, DefaultCopyLabels()) {
		t.Errorf("kubernetes defaults: %+v", k)
	}
	if f := cfg.FileSD[0]; f.Scheme != "http" || f.Path != "/metrics" || f.Kind != "engine" || f.RefreshInterval != 30*time.Second || f.HTTPClient != nil {
		t.Errorf("file_sd defaults: %+v", f)
	}
	if cfg.Shard.By != ShardByTarget || cfg.Shard.Total != 0 {
		t.Errorf("shard defaults: %+v", cfg.Shard)
	}

	// Explicit values survive: an empty copy list copies nothing, false
	// drops pods that are not Ready.
	cfg, err = decode(t, []byte("discovery:\n  kubernetes: {copy_labels: [], include_not_ready: false, watch_nodes: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	k = cfg.WithDefaults().Kubernetes
	if len(k.CopyLabels) != 0 || *k.IncludeNotReady || *k.WatchNodes {
		t.Errorf("explicit values overridden: copy_labels %v, include_not_ready %v, watch_nodes %v", k.CopyLabels, *k.IncludeNotReady, *k.WatchNodes)
	}
}

func TestConfigValidateNamesThePath(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		path string // the YAML path the error must name
	}{
		{"dns: [{port: 30000}]", "discovery.dns[0].names:"},
		{"dns: [{names: [a.svc, 'http://b.svc']}]", "discovery.dns[0].names[1]:"},
		{"dns: [{names: ['b.svc:30000']}]", "discovery.dns[0].names[0]:"},
		{"dns: [{names: [a.svc, a.svc.]}]", "discovery.dns[0].names[1]:"},
		{"dns: [{names: [a.svc], port: 70000}]", "discovery.dns[0].port:"},
		{"dns: [{names: [a.svc], refresh_interval: 100ms}]", "discovery.dns[0].refresh_interval:"},
		{"dns: [{names: [a.svc]}, {names: [b.svc], name_prefix: 'llm/'}]", "discovery.dns[1].name_prefix:"},
		{"dns: [{names: [a.svc], scheme: ftp}]", "discovery.dns[0].scheme:"},
		{"dns: [{names: [a.svc], path: metrics}]", "discovery.dns[0].path:"},
		{"dns: [{names: [a.svc], kind: router}]", "discovery.dns[0].kind:"},
		{"kubernetes: {port: 0}", "discovery.kubernetes.port:"},
		{"kubernetes: {port: 65536}", "discovery.kubernetes.port:"},
		{"kubernetes: {port: 'http port'}", "discovery.kubernetes.port:"},
		{"kubernetes: {label_selector: 'app in ('}", "discovery.kubernetes.label_selector:"},
		{"kubernetes: {namespaces: [llm, LLM_Prod]}", "discovery.kubernetes.namespaces[1]:"},
		{"kubernetes: {namespaces: [llm, llm]}", "discovery.kubernetes.namespaces[1]:"},
		{"kubernetes: {copy_labels: [model, 'bad key!']}", "discovery.kubernetes.copy_labels[1]:"},
		{"kubernetes: {model_label: 'a b'}", "discovery.kubernetes.model_label:"},
		{"kubernetes: {kind: router}", "discovery.kubernetes.kind:"},
		{"kubernetes: {http_client: {bearer_token: a, bearer_token_file: /t}}", "discovery.kubernetes.http_client:"},
		{"dns: [{names: [a.svc], http_client: {basic_auth: {username: u}, authorization: {credentials: c}}}]", "discovery.dns[0].http_client:"},
		{"file_sd: [{refresh_interval: 1m}]", "discovery.file_sd[0].files:"},
		{"file_sd: [{files: [/t/*.json, /t/targets.txt]}]", "discovery.file_sd[0].files[1]:"},
		{"file_sd: [{files: ['/t/[.json']}]", "discovery.file_sd[0].files[0]:"},
		{"file_sd: [{files: [/t/a.json], refresh_interval: 10ms}]", "discovery.file_sd[0].refresh_interval:"},
		{"file_sd: [{files: [/t/a.json], name_prefix: 'a b'}]", "discovery.file_sd[0].name_prefix:"},
		{"file_sd: [{files: [/t/a.json], kind: router}]", "discovery.file_sd[0].kind:"},
		{"file_sd: [{files: [/t/a.json], http_client: {basic_auth: {username: u, password: p, password_file: /p}}}]", "discovery.file_sd[0].http_client:"},
		{"shard: {total: 2, index: 2}", "discovery.shard.index:"},
		{"shard: {total: 2, index: -1}", "discovery.shard.index:"},
		{"shard: {index: 1}", "discovery.shard.index:"},
		{"shard: {total: -1}", "discovery.shard.total:"},
		{"shard: {total: 2, by: replica}", "discovery.shard.by:"},
	} {
		cfg, err := decode(t, []byte("discovery:\n  "+tc.yaml+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		err = cfg.Validate("discovery")
		if err == nil || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: error %v, want one naming %s", tc.yaml, err, tc.path)
		}
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	cfg, err := decode(t, []byte("discovery:\n  dns: [{names: []}]\n  kubernetes: {port: 0, scheme: ftp}\n  shard: {total: 2, index: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate("discovery")
	for _, path := range []string{"dns[0].names", "kubernetes.port", "kubernetes.scheme", "shard.index"} {
		if err == nil || !strings.Contains(err.Error(), "discovery."+path+":") {
			t.Errorf("error %v does not name %s", err, path)
		}
	}
}

// A dcgm-exporter (kind gpu) is found on its own port: a DNS entry for its
// headless Service needs no port.
func TestConfigGPUKindTakesTheExportersPort(t *testing.T) {
	cfg, err := decode(t, []byte("discovery:\n  dns:\n    - {names: [sglang.llm.svc]}\n    - {names: [dcgm-headless.gpu-operator.svc], kind: gpu, name_prefix: dcgm-}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate("discovery"); err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	if d := cfg.DNS[1]; d.Port != 9400 || d.Kind != "gpu" || cfg.DNS[0].Port != 30000 {
		t.Errorf("dns entries %+v", cfg.DNS)
	}
	cfg, err = decode(t, []byte("discovery:\n  kubernetes: {kind: nvidia}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate("discovery"); err == nil || !strings.Contains(err.Error(), "discovery.kubernetes.kind") {
		t.Errorf("an unknown kind: %v", err)
	}
}
