#!/usr/bin/env bash
# Builds the container image without a Docker daemon or a registry
# (scripts/build-image: the Dockerfile's final stage, FROM scratch) and checks
# the tarball with tools independent of the builder: tar and jq read the
# docker-archive layout, and the extracted binary must run.
#
#   bash .ci/image.sh WORKDIR
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:?usage: image.sh WORKDIR}
mkdir -p "$work"

fail() {
	echo "image: $*" >&2
	exit 1
}

missing=()
[[ -s /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
command -v jq >/dev/null || missing+=(jq)
if ((${#missing[@]})); then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

version=ci-$(git rev-parse --short=12 HEAD)
revision=$(git rev-parse HEAD)
go run ./scripts/build-image -o "$work/image.tar" -version "$version" -revision "$revision"
ls -l "$work/image.tar"

mkdir -p "$work/archive" "$work/rootfs"
tar -xf "$work/image.tar" -C "$work/archive"
manifest="$work/archive/manifest.json"
jq -e 'length == 1' "$manifest" >/dev/null || fail "manifest.json holds $(jq length "$manifest") images, want 1"
tag=$(jq -r '.[0].RepoTags[0]' "$manifest")
[[ $tag == "ghcr.io/sglang-watchdog/sglang-watchdog:$version" ]] || fail "tag $tag"
config="$work/archive/$(jq -r '.[0].Config' "$manifest")"
echo "--- image config"
jq '{os, architecture, config}' "$config"
jq -e '.os == "linux"' "$config" >/dev/null || fail "os"
jq -e '.config.Entrypoint == ["/watchdog"] and (.config.Cmd // [] | length == 0)' "$config" >/dev/null || fail "entrypoint"
jq -e '.config.User == "65532:65532"' "$config" >/dev/null || fail "user"
jq -e '.config.ExposedPorts | keys == ["9402/tcp"]' "$config" >/dev/null || fail "exposed ports"
jq -e --arg v "$version" --arg r "$revision" '.config.Labels["org.opencontainers.image.version"] == $v
	and .config.Labels["org.opencontainers.image.revision"] == $r
	and .config.Labels["org.opencontainers.image.licenses"] == "Apache-2.0"' "$config" >/dev/null || fail "labels"

# One layer: the whole file system, with owners and modes.
jq -e '.[0].Layers | length == 1' "$manifest" >/dev/null || fail "want one layer"
layer="$work/archive/$(jq -r '.[0].Layers[0]' "$manifest")"
tar -tvzf "$layer" >"$work/listing.txt"
echo "--- layer"
cat "$work/listing.txt"
expect() { grep -Eq "$1" "$work/listing.txt" || fail "layer: no line matching $1"; }
expect '^-rwxr-xr-x 0/0 .* watchdog$'
expect '^-rw-r--r-- 0/0 .* etc/ssl/certs/ca-certificates.crt$'
expect '^-rw-r--r-- 0/0 .* etc/passwd$'
expect '^drwx------ 65532/65532 .* var/lib/watchdog/$'
expect '^drwxrwxrwt 0/0 .* tmp/$'
tar -xzf "$layer" -C "$work/rootfs"
grep -q '^nonroot:x:65532:65532:' "$work/rootfs/etc/passwd" || fail "no nonroot user in /etc/passwd"

echo "--- /watchdog version"
got=$("$work/rootfs/watchdog" version)
echo "$got"
[[ $got == *"$version"* ]] || fail "watchdog version printed $got, want $version"
[[ $got == *"revision: $revision"* ]] || fail "watchdog version printed $got, want revision $revision"
echo "image ok: $tag"
