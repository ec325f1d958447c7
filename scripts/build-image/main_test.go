package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

const dockerfilePath = "../../Dockerfile"

// parseFinalStage reads the instructions after a Dockerfile's last FROM.
// It knows the few instructions a final stage of ours uses and rejects
// any other, so a new instruction must be taught to build-image first.
func parseFinalStage(dockerfile string) (stage, error) {
	var lines []string
	var cont strings.Builder
	for _, l := range strings.Split(dockerfile, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") || (t == "" && cont.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(t, "\\"); ok {
			cont.WriteString(s + " ")
			continue
		}
		cont.WriteString(t)
		lines = append(lines, cont.String())
		cont.Reset()
	}
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			last = i
		}
	}
	if last < 0 {
		return stage{}, errors.New("no FROM")
	}
	s := stage{Labels: map[string]string{}}
	label := regexp.MustCompile(`([\w.\-]+)="((?:[^"\\]|\\.)*)"`)
	for _, l := range lines[last:] {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			s.From = rest
		case "ARG":
			// VERSION and REVISION: the values build-image is given.
		case "LABEL":
			for _, m := range label.FindAllStringSubmatch(rest, -1) {
				s.Labels[m[1]] = m[2]
			}
		case "COPY":
			f := strings.Fields(rest)
			var e entry
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				k, v, _ := strings.Cut(strings.TrimPrefix(f[0], "--"), "=")
				switch k {
				case "from":
					e.From = v
				case "chown":
					e.Chown = v
				default:
					return stage{}, fmt.Errorf("COPY --%s: unknown to build-image", k)
				}
				f = f[1:]
			}
			if len(f) != 2 {
				return stage{}, fmt.Errorf("COPY %s: want one source and one destination", rest)
			}
			e.Source, e.Path = f[0], f[1]
			s.Copies = append(s.Copies, e)
		case "USER":
			s.User = rest
		case "EXPOSE":
			s.Expose = rest
			if !strings.Contains(rest, "/") {
				s.Expose += "/tcp"
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &s.Entrypoint); err != nil {
				return stage{}, fmt.Errorf("ENTRYPOINT must be the JSON form: %w", err)
			}
		default:
			return stage{}, fmt.Errorf("%s in the final stage: unknown to build-image", instr)
		}
	}
	return s, nil
}

// stageDiff lists how a Dockerfile's final stage differs from the stage
// build-image builds (modes and directories come from the build stage and
// are not compared).
func stageDiff(dockerfile string, want stage) []string {
	got, err := parseFinalStage(dockerfile)
	if err != nil {
		return []string{err.Error()}
	}
	var diffs []string
	check := func(what string, g, w any) {
		if !reflect.DeepEqual(g, w) {
			diffs = append(diffs, fmt.Sprintf("%s: Dockerfile %v, build-image %v", what, g, w))
		}
	}
	check("FROM", got.From, want.From)
	check("LABEL", got.Labels, want.Labels)
	copyLine := func(es []entry) []string {
		var out []string
		for _, e := range es {
			out = append(out, fmt.Sprintf("from=%q chown=%q %s %s", e.From, e.Chown, e.Source, e.Path))
		}
		return out
	}
	check("COPY", copyLine(got.Copies), copyLine(want.Copies))
	check("USER", got.User, want.User)
	check("EXPOSE", got.Expose, want.Expose)
	check("ENTRYPOINT", got.Entrypoint, want.Entrypoint)
	return diffs
}

func TestDockerfileFinalStageIsTheBuild(t *testing.T) {
	b, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range stageDiff(string(b), finalStage()) {
		t.Errorf("%s: %s", dockerfilePath, d)
	}
	// The binary is built with the same flags.
	if !strings.Contains(string(b), `go build -trimpath -ldflags="`+ldflags+`"`) {
		t.Errorf("%s: the build stage's go build flags differ from buildBinary's", dockerfilePath)
	}
}

// The comparison catches each kind of drift.
func TestStageDiffCatchesDrift(t *testing.T) {
	b, err := os.ReadFile(dockerfilePath)
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(b)
	for _, tc := range []struct{ name, from, to, want string }{
		{"base image", "\nFROM scratch", "\nFROM gcr.io/distroless/static-debian12:nonroot", "FROM"},
		{"user", "USER 65532:65532", "USER 1000:1000", "USER"},
		{"port", "EXPOSE 9402", "EXPOSE 8080", "EXPOSE"},
		{"entrypoint", `ENTRYPOINT ["/watchdog"]`, `ENTRYPOINT ["/watchdog", "demo"]`, "ENTRYPOINT"},
		{"label", `org.opencontainers.image.licenses="Apache-2.0"`, `org.opencontainers.image.licenses="MIT"`, "LABEL"},
		{"owner", "--chown=65532:65532 /out/var/lib/watchdog", "/out/var/lib/watchdog", "COPY"},
		{"new file", "COPY --from=build /out/watchdog /watchdog", "COPY --from=build /out/watchdog /watchdog\nCOPY --from=build /out/extra /extra", "COPY"},
		{"new instruction", "USER 65532:65532", "USER 65532:65532\nENV HOME=/tmp", "ENV"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(dockerfile, tc.from) {
				t.Fatalf("the Dockerfile no longer contains %q: update the test", tc.from)
			}
			diffs := stageDiff(strings.Replace(dockerfile, tc.from, tc.to, 1), finalStage())
			if !slices.ContainsFunc(diffs, func(d string) bool { return strings.Contains(d, tc.want) }) {
				t.Errorf("diffs %q, want one about %s", diffs, tc.want)
			}
		})
	}
}

type layerEntry struct {
	mode     int64
	uid, gid int
	dir      bool
	content  string
}

// build writes the image the tarball holds: the config says what the
// Dockerfile says, and the one layer holds exactly its files.
func TestBuildWritesTheStage(t *testing.T) {
	in := inputs{binary: []byte("#!binary"), caCertificates: []byte("CA BUNDLE"), context: "../..",
		version: "v1.2.3", revision: "abc123", arch: "arm64", created: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	img, err := build(finalStage(), in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "image.tar")
	if err := tarball.WriteToFile(path, mustTag(t, Repository+":v1.2.3"), img); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "arm64" || !cfg.Created.Equal(in.created) {
		t.Errorf("platform %s/%s created %v", cfg.OS, cfg.Architecture, cfg.Created)
	}
	c := cfg.Config
	if !slices.Equal(c.Entrypoint, []string{"/watchdog"}) || c.User != "65532:65532" || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q user %q", c.Entrypoint, c.Cmd, c.User)
	}
	if got := slices.Collect(maps.Keys(c.ExposedPorts)); !slices.Equal(got, []string{"9402/tcp"}) {
		t.Errorf("exposed ports %v", got)
	}
	if c.Labels["org.opencontainers.image.version"] != "v1.2.3" || c.Labels["org.opencontainers.image.revision"] != "abc123" ||
		c.Labels["org.opencontainers.image.licenses"] != "Apache-2.0" {
		t.Errorf("labels %v", c.Labels)
	}
	passwd, err := os.ReadFile("rootfs/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	group, err := os.ReadFile("rootfs/etc/group")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]layerEntry{
		"etc":                               {mode: 0o755, dir: true},
		"etc/ssl":                           {mode: 0o755, dir: true},
		"etc/ssl/certs":                     {mode: 0o755, dir: true},
		"etc/ssl/certs/ca-certificates.crt": {mode: 0o644, content: "CA BUNDLE"},
		"etc/passwd":                        {mode: 0o644, content: string(passwd)},
		"etc/group":                         {mode: 0o644, content: string(group)},
		"tmp":                               {mode: 0o1777, dir: true},
		"watchdog":                          {mode: 0o755, content: "#!binary"},
		"var":                               {mode: 0o755, dir: true},
		"var/lib":                           {mode: 0o755, dir: true},
		"var/lib/watchdog":                  {mode: 0o700, dir: true, uid: 65532, gid: 65532},
	}
	got := map[string]layerEntry{}
	rc := mutate.Extract(back)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = layerEntry{mode: h.Mode, uid: h.Uid, gid: h.Gid, dir: h.Typeflag == tar.TypeDir, content: string(body)}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("layer:\n got %v\nwant %v", got, want)
	}
	if !strings.Contains(string(passwd), "nonroot:x:65532:65532:") || !strings.Contains(string(group), "nonroot:x:65532:") {
		t.Errorf("rootfs/etc: no nonroot user 65532")
	}
}

func TestBuildRejectsWhatItCannotBuild(t *testing.T) {
	in := inputs{context: "../..", arch: "amd64"}
	distroless := finalStage()
	distroless.From = "gcr.io/distroless/static-debian12:nonroot"
	unknown := finalStage()
	unknown.Copies = append(unknown.Copies, entry{From: "build", Source: "/out/extra", Path: "/extra", Mode: 0o644})
	missing := finalStage()
	missing.Copies = append(missing.Copies, entry{Source: "scripts/build-image/rootfs/etc/shadow", Path: "/etc/shadow", Mode: 0o600})
	for name, s := range map[string]stage{"base image": distroless, "unknown build output": unknown, "missing context file": missing} {
		if _, err := build(s, in); err == nil {
			t.Errorf("%s: built", name)
		}
	}
}

func mustTag(t *testing.T, s string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// The chart deploys, by default, the image this program names.
func TestChartDefaultImageIsTheBuild(t *testing.T) {
	b, err := os.ReadFile("../../deploy/helm/sglang-watchdog/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	if values.Image.Repository != Repository || values.Image.Tag != "" {
		t.Errorf("values.yaml image %s:%s, want %s with the chart's appVersion as tag (build-image -version <appVersion>)",
			values.Image.Repository, values.Image.Tag, Repository)
	}
}
