# syntax=docker/dockerfile:1
#
# sglang-watchdog container image: a static Go binary FROM scratch, with a CA
# bundle, a nonroot user and its state directory.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#                --build-arg REVISION=$(git rev-parse HEAD) -t sglang-watchdog:dev .
#
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...
# (the build stage runs natively and cross-compiles; no emulation is needed
# because the binary is pure Go, CGO_ENABLED=0).
#
# Requires BuildKit (the default builder since Docker 23) for --platform=$BUILDPLATFORM
# and the RUN --mount build cache.
#
# Without Docker: `go run ./scripts/build-image -o sglang-watchdog.tar` builds
# the same final stage (CI does, so this file cannot rot unnoticed); see
# deploy/README.md. TestDockerfileFinalStageIsTheBuild (scripts/build-image)
# fails when the final stage below and that program disagree.

# Pin the patch release here (e.g. 1.26.8-bookworm) for byte-reproducible builds.
# go.mod says `go 1.26.8`: an older 1.26.x image would try to download a newer toolchain.
ARG GO_IMAGE=golang:1.26-bookworm

# ---------------------------------------------------------------------------
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build

WORKDIR /src

# Dependencies first: this layer is rebuilt only when go.mod/go.sum change.
# (No cache mount here on purpose: the modules then live in the layer, so a
# CI builder with only a registry layer cache still skips the download.)
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .

# Set by BuildKit to the platform being built (--platform), so the native
# build stage cross-compiles for it.
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=unknown

# main.version must exist in package main (cmd/watchdog) for -X to take effect;
# `watchdog --version` prints it with the revision (prometheus/common/version).
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w -X main.version=${VERSION} -X github.com/prometheus/common/version.Revision=${REVISION}" \
        -o /out/watchdog ./cmd/watchdog

# The state directory (incidents, Slack message ts, PagerDuty dedup keys,
# outbox). The final stage has no shell, so it is created here and copied
# with the right owner. Mode 0700: it holds routing state that only the daemon
# reads. /tmp, sticky and world-writable as usual, for anything that asks
# for a temporary file.
RUN mkdir -p /out/var/lib/watchdog /out/tmp && chmod 0700 /out/var/lib/watchdog && chmod 1777 /out/tmp

# ---------------------------------------------------------------------------
# scratch, not a distroless base: the image holds exactly the files below, and
# scripts/build-image can produce the same image without pulling a base from a
# registry. The watchdog needs only the CA bundle (HTTPS to Slack and
# PagerDuty), a passwd/group naming its UID, its state directory and /tmp.
FROM scratch

ARG VERSION=dev
ARG REVISION=unknown

LABEL org.opencontainers.image.title="sglang-watchdog" \
      org.opencontainers.image.description="Watches SGLang replicas' Prometheus /metrics, diagnoses incidents and pages Slack/PagerDuty" \
      org.opencontainers.image.source="https://github.com/sglang-watchdog/sglang-watchdog" \
      org.opencontainers.image.url="https://github.com/sglang-watchdog/sglang-watchdog" \
      org.opencontainers.image.documentation="https://github.com/sglang-watchdog/sglang-watchdog/tree/main/deploy" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"

# The golang image is Debian with ca-certificates installed.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY scripts/build-image/rootfs/etc/passwd /etc/passwd
COPY scripts/build-image/rootfs/etc/group /etc/group
COPY --from=build /out/tmp /tmp
COPY --from=build /out/watchdog /watchdog
COPY --from=build --chown=65532:65532 /out/var/lib/watchdog /var/lib/watchdog

# Numeric UID:GID ("nonroot" in /etc/passwd) so Kubernetes' runAsNonRoot can
# verify it without resolving a user name.
USER 65532:65532

# HTTP: /metrics, /healthz, /readyz, /api/v1/alerts, /api/v1/targets, /runbooks/<class>.
# Keep in step with WATCHDOG_LISTEN_ADDRESS (default ":9402") and deploy/.
EXPOSE 9402

# No HEALTHCHECK: the image has no shell or curl; orchestrators probe
# /healthz (liveness) and /readyz (readiness) over HTTP instead.
#
# State is not persisted unless WATCHDOG_STATE_DIR (or state_dir in the config)
# points at /var/lib/watchdog and a volume is mounted there; the Kubernetes
# manifests in deploy/ do both. It is deliberately not set here so that the
# YAML config's state_dir is not silently overridden by an image default.
ENTRYPOINT ["/watchdog"]
