// Command build-image builds the sglang-watchdog container image without a
// container daemon or a registry: the same image as the Dockerfile's final
// stage (FROM scratch), written as a tarball that `docker load` and
// `crane push` accept.
//
//	go run ./scripts/build-image -version v0.1.0 -revision "$(git rev-parse HEAD)" -o sglang-watchdog.tar
//
// It compiles ./cmd/watchdog with the Dockerfile's flags, takes the CA
// bundle from this machine (Debian's ca-certificates package) where the
// Dockerfile takes it from its Debian build stage, and /etc/passwd and
// /etc/group from scripts/build-image/rootfs, which the Dockerfile copies
// too. TestDockerfileFinalStageIsTheBuild holds the Dockerfile's final
// stage and finalStage below together, so neither can drift alone.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Repository is where the image is published; the Helm chart's and the
// kustomizations' default image name.
const Repository = "ghcr.io/sglang-watchdog/sglang-watchdog"

// entry is one COPY of the Dockerfile's final stage.
type entry struct {
	// From is the COPY's --from stage; "" copies from the build context.
	From string
	// Source is the COPY's source path, in that stage or the context.
	Source string
	// Path is where it lands in the image.
	Path string
	// Chown is the COPY's --chown; "" leaves it to root.
	Chown string
	// Dir: an empty directory with Mode (made in the build stage).
	Dir  bool
	Mode int64
}

// stage is the Dockerfile's final stage as data.
type stage struct {
	From       string
	Labels     map[string]string // values may name the ARGs VERSION and REVISION
	Copies     []entry
	User       string
	Expose     string
	Entrypoint []string
}

// finalStage is what the Dockerfile's final stage says.
func finalStage() stage {
	return stage{
		From: "scratch",
		Labels: map[string]string{
			"org.opencontainers.image.title":         "sglang-watchdog",
			"org.opencontainers.image.description":   "Watches SGLang replicas' Prometheus /metrics, diagnoses incidents and pages Slack/PagerDuty",
			"org.opencontainers.image.source":        "https://github.com/sglang-watchdog/sglang-watchdog",
			"org.opencontainers.image.url":           "https://github.com/sglang-watchdog/sglang-watchdog",
			"org.opencontainers.image.documentation": "https://github.com/sglang-watchdog/sglang-watchdog/tree/main/deploy",
			"org.opencontainers.image.licenses":      "Apache-2.0",
			"org.opencontainers.image.version":       "${VERSION}",
			"org.opencontainers.image.revision":      "${REVISION}",
		},
		Copies: []entry{
			{From: "build", Source: "/etc/ssl/certs/ca-certificates.crt", Path: "/etc/ssl/certs/ca-certificates.crt", Mode: 0o644},
			{Source: "scripts/build-image/rootfs/etc/passwd", Path: "/etc/passwd", Mode: 0o644},
			{Source: "scripts/build-image/rootfs/etc/group", Path: "/etc/group", Mode: 0o644},
			{From: "build", Source: "/out/tmp", Path: "/tmp", Dir: true, Mode: 0o1777},
			{From: "build", Source: "/out/watchdog", Path: "/watchdog", Mode: 0o755},
			{From: "build", Source: "/out/var/lib/watchdog", Path: "/var/lib/watchdog", Chown: "65532:65532", Dir: true, Mode: 0o700},
		},
		User:       "65532:65532",
		Expose:     "9402/tcp",
		Entrypoint: []string{"/watchdog"},
	}
}

// inputs are the contents the build stage would have produced.
type inputs struct {
	binary         []byte // /out/watchdog
	caCertificates []byte // the build stage's /etc/ssl/certs/ca-certificates.crt
	context        string // the build context (the repository root)
	version        string
	revision       string
	arch           string
	created        time.Time
}

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "build-image:", err)
		os.Exit(1)
	}
}

func run(args []string, log io.Writer) error {
	fs := flag.NewFlagSet("build-image", flag.ContinueOnError)
	out := fs.String("o", "", "write the image tarball here (required)")
	tag := fs.String("tag", "", "the image's name in the tarball (default "+Repository+":VERSION)")
	version := fs.String("version", "dev", "the watchdog's version (the Dockerfile's VERSION)")
	revision := fs.String("revision", "unknown", "the source revision (the Dockerfile's REVISION)")
	arch := fs.String("arch", runtime.GOARCH, "GOARCH of the image (linux only)")
	ca := fs.String("ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to ship (Debian's ca-certificates)")
	context := fs.String("context", ".", "the repository root: the Dockerfile's build context")
	created := fs.String("created", "", "image creation time, RFC 3339 (default: the epoch, for reproducible images)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return errors.New("-o is required")
	}
	if *tag == "" {
		*tag = Repository + ":" + *version
	}
	ref, err := name.NewTag(*tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	in := inputs{context: *context, version: *version, revision: *revision, arch: *arch, created: time.Unix(0, 0).UTC()}
	if *created != "" {
		if in.created, err = time.Parse(time.RFC3339, *created); err != nil {
			return fmt.Errorf("-created: %w", err)
		}
	}
	if in.caCertificates, err = os.ReadFile(*ca); err != nil {
		return fmt.Errorf("-ca-certificates: %w (install Debian's ca-certificates)", err)
	}
	if in.binary, err = buildBinary(*context, *version, *revision, *arch); err != nil {
		return err
	}
	img, err := build(finalStage(), in)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, ref, img); err != nil {
		return fmt.Errorf("write %s: %w", *out, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "wrote %s: %s linux/%s %s\n", *out, ref, *arch, digest)
	return nil
}

// ldflags are the Dockerfile build stage's -ldflags, ${VERSION} and
// ${REVISION} its build arguments: the version and the revision reach
// `watchdog --version` and watchdog_build_info (prometheus/common/version).
const ldflags = "-s -w -X main.version=${VERSION} -X github.com/prometheus/common/version.Revision=${REVISION}"

// buildBinary compiles the watchdog as the Dockerfile's build stage does.
func buildBinary(context, version, revision, arch string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "build-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "watchdog")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags="+strings.NewReplacer("${VERSION}", version, "${REVISION}", revision).Replace(ldflags), "-o", bin, "./cmd/watchdog")
	cmd.Dir = context
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/watchdog: %w", err)
	}
	return os.ReadFile(bin)
}

// build assembles the image: one layer with every COPY of the stage, and
// the stage's configuration.
func build(s stage, in inputs) (v1.Image, error) {
	if s.From != "scratch" {
		return nil, fmt.Errorf("the final stage is FROM %s; only scratch can be built without a registry", s.From)
	}
	layerTar, err := rootfs(s, in)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", in.arch
	cfg.Created = v1.Time{Time: in.created}
	args := map[string]string{"VERSION": in.version, "REVISION": in.revision}
	labels := map[string]string{}
	for k, v := range s.Labels {
		labels[k] = os.Expand(v, func(arg string) string { return args[arg] })
	}
	cfg.Config = v1.Config{
		Entrypoint:   s.Entrypoint,
		User:         s.User,
		ExposedPorts: map[string]struct{}{s.Expose: {}},
		Labels:       labels,
		// What Docker gives a FROM scratch image.
		Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
	}
	return mutate.ConfigFile(img, cfg)
}

// rootfs writes the stage's files as a layer tarball, parent directories
// first (root-owned, 0755, as COPY creates them).
func rootfs(s stage, in inputs) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	made := map[string]bool{}
	header := func(h *tar.Header) error {
		h.ModTime, h.Format = in.created, tar.FormatPAX
		return tw.WriteHeader(h)
	}
	var parents func(dir string) error
	parents = func(dir string) error {
		if dir == "." || dir == "/" || made[dir] {
			return nil
		}
		if err := parents(filepath.Dir(dir)); err != nil {
			return err
		}
		made[dir] = true
		return header(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755})
	}
	for _, e := range s.Copies {
		uid, gid, err := owner(e.Chown)
		if err != nil {
			return nil, fmt.Errorf("COPY %s: %w", e.Source, err)
		}
		p := strings.TrimPrefix(e.Path, "/")
		if err := parents(filepath.Dir(p)); err != nil {
			return nil, err
		}
		if e.Dir {
			made[p] = true
			if err := header(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: e.Mode, Uid: uid, Gid: gid}); err != nil {
				return nil, err
			}
			continue
		}
		content, err := in.content(e)
		if err != nil {
			return nil, err
		}
		if err := header(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: e.Mode, Uid: uid, Gid: gid, Size: int64(len(content))}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// content is what a COPY's source holds.
func (in inputs) content(e entry) ([]byte, error) {
	switch {
	case e.From == "":
		return os.ReadFile(filepath.Join(in.context, filepath.FromSlash(e.Source)))
	case e.From == "build" && e.Source == "/out/watchdog":
		return in.binary, nil
	case e.From == "build" && e.Source == "/etc/ssl/certs/ca-certificates.crt":
		return in.caCertificates, nil
	}
	return nil, fmt.Errorf("COPY --from=%s %s: build-image does not know how the build stage makes it", e.From, e.Source)
}

func owner(chown string) (uid, gid int, err error) {
	if chown == "" {
		return 0, 0, nil
	}
	// Numeric only: the image's /etc/passwd is not read to resolve names.
	if n, err := fmt.Sscanf(chown, "%d:%d", &uid, &gid); err != nil || n != 2 {
		return 0, 0, fmt.Errorf("--chown=%s: want numeric uid:gid", chown)
	}
	return uid, gid, nil
}
