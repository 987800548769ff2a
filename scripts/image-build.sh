#!/usr/bin/env bash
# Build ctrain's Docker image from Dockerfile.gpu with BuildKit, from the wheelhouse only.
#
#   scripts/image-build.sh gpu|cpu NAME:TAG
#
# Steps: the wheelhouse of the flavour and TensorFlow (scripts/wheelhouse.sh, only when missing;
# ctrain's wheel always, offline, seconds), a build context in
# ~/.cache/ctrain/image-context/FLAVOUR-tfTF_VERSION (hard links where possible: the recipe
# script, wheelhouse/, ctrain/), then the build with the host's network (apt reaches the Debian
# mirror; pip never leaves the wheelhouse), every pin a --build-arg from the version matrix, and
# `horovodrun --check-build` as its gate.
#
# Environment:
#   TF_VERSION      the TensorFlow of the version matrix (src/ctrain/matrix.toml; its default)
#   BASE_IMAGE      Debian 12 image to build on (Dockerfile.gpu's default: debian:12-slim);
#                   scripts/base-image.sh makes one locally where no registry can be reached
#   CA_BUNDLE       a site's CA bundle (TLS-inspecting proxy), passed as the build secret
#                   ca_bundle: trusted during the build, never stored in the image
#   DEBIAN_MIRROR   Debian mirror for the GPU build's contrib/non-free CUDA toolkit
#   WHEELHOUSE      build/wheelhouse
#   DOCKER          the docker client (default: one that can use BuildKit, see below)
#   BUILD_FLAGS     more `docker build` flags (e.g. --no-cache)
#   CTRAIN_IMAGE_CONTEXT  where the build contexts go (~/.cache/ctrain/image-context)
# Shows the build's progress on stderr (BuildKit's display on a terminal, else one line per step;
# CTRAIN_PROGRESS, scripts/progress-mode.sh) and, last, the image's size and the build's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${1:?usage: image-build.sh gpu|cpu NAME:TAG}
name=${2:?usage: image-build.sh gpu|cpu NAME:TAG}
wheelhouse=${WHEELHOUSE:-build/wheelhouse}
case "$flavour" in gpu | cpu) ;; *) echo "image-build: flavour $flavour? expected gpu or cpu" >&2; exit 2 ;; esac

# A client that builds with BuildKit: `docker buildx`, or a client older than 23 (Debian 12's
# docker.io 20.10 has BuildKit built in; newer clients need the buildx plugin for it).
builder=()
pick_builder() {
    local client major
    for client in ${DOCKER:-docker /usr/bin/docker}; do
        command -v "$client" >/dev/null || continue
        if "$client" buildx version >/dev/null 2>&1; then
            builder=("$client" buildx build --load)
            return 0
        fi
        major=$("$client" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1)
        if [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -lt 23 ]; then
            builder=(env DOCKER_BUILDKIT=1 "$client" build)
            return 0
        fi
    done
    echo "image-build: no docker client that builds with BuildKit (docker buildx, or Debian's docker.io 20.10). Fix: make system" >&2
    exit 1
}
pick_builder

t0=$SECONDS
tf=${TF_VERSION:-$(python3 src/ctrain/matrix.py default)}
mapfile -t pins < <(python3 src/ctrain/matrix.py pins "$tf" "$flavour")
[ "${#pins[@]}" -gt 0 ] || exit 1
part=$flavour-tf$tf
if [ ! -f "$wheelhouse/$part/SHA256SUMS" ]; then
    echo "image-build: no $part wheelhouse in $wheelhouse; gathering it (make wheelhouse FLAVOUR=$flavour TF_VERSION=$tf)" >&2
    TF_VERSION=$tf scripts/wheelhouse.sh "$flavour" "$wheelhouse"
fi
scripts/wheelhouse.sh ctrain "$wheelhouse"  # ctrain's current source, offline, seconds

# The context lives at a fixed place outside the checkout: BuildKit keys its copy of a local
# context by the directory's path, so a fixed path is synced incrementally and reused, where a
# fresh clone's path would add a new full copy (2.5 GB for gpu) to the builder's cache every time.
context=${CTRAIN_IMAGE_CONTEXT:-${XDG_CACHE_HOME:-$HOME/.cache}/ctrain/image-context}/$part
mkdir -p "$(dirname "$context")"
exec 8>"$context.lock"
flock -w 3600 8 || { echo "image-build: another build holds $context.lock" >&2; exit 1; }
rm -rf "$context"
mkdir -p "$context/docker"
cp docker/install.sh "$context/docker/"
# Hard links where the wheelhouse and the context share a mount; else a copy (a checkout on
# another filesystem, /tmp on tmpfs say). A cp -al that failed midway has made the directory, and a
# second cp into an existing directory would nest the wheelhouse one level down: start again.
if ! cp -al "$wheelhouse/$part" "$context/wheelhouse" 2>/dev/null; then
    rm -rf "$context/wheelhouse"
    cp -a "$wheelhouse/$part" "$context/wheelhouse"
fi
cp -a "$wheelhouse/ctrain" "$context/ctrain"

version=$(sed -nE 's/^__version__ = "(.+)"$/\1/p' src/ctrain/__init__.py)
args=(--build-arg "CTRAIN_VERSION=$version")
for pin in "${pins[@]}"; do
    args+=(--build-arg "$pin")
done
[ -z "${BASE_IMAGE:-}" ] || args+=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
[ -z "${DEBIAN_MIRROR:-}" ] || args+=(--build-arg "DEBIAN_MIRROR=$DEBIAN_MIRROR")
if [ -n "${CA_BUNDLE:-}" ]; then
    [ -r "$CA_BUNDLE" ] || { echo "image-build: CA_BUNDLE=$CA_BUNDLE is not readable" >&2; exit 1; }
    args+=(--secret "id=ca_bundle,src=$CA_BUNDLE")
fi
# shellcheck disable=SC2206  # BUILD_FLAGS is a list of flags on purpose
args+=(${BUILD_FLAGS:-})

# build_steps: BuildKit's plain output (stdin) as one line per finished step of the recipe.
build_steps() {
    awk '/^#[0-9]+ \[[^]]*[0-9]+\/[0-9]+\] / { n = $1; sub(/^#[0-9]+ /, ""); title[n] = $0; next }
        /^#[0-9]+ (DONE|CACHED|ERROR)/ && ($1 in title) {
            how = $2 == "DONE" ? $3 : ($2 == "CACHED" ? "cached" : "failed")
            printf "image-build: %s (%s)\n", title[$1], how; fflush(); delete title[$1] }'
}
discard() { cat >/dev/null; }

# The progress (scripts/progress-mode.sh): BuildKit's own display on a terminal; otherwise one
# line per step, or nothing, with the build's last lines if it fails.
progress=$(scripts/progress-mode.sh)
echo "image-build: ${builder[*]} $name ($flavour, TensorFlow $tf) from $context" >&2
build=("${builder[@]}" --network host -f Dockerfile.gpu -t "$name" "${args[@]}" "$context")
if [ "$progress" = bar ]; then
    "${build[@]}" --progress auto >&2
else
    log=$(mktemp)
    filter=(build_steps)
    [ "$progress" = lines ] || filter=(discard)
    if ! "${build[@]}" --progress plain 2>&1 | tee "$log" | "${filter[@]}" >&2; then
        tail -n 60 "$log" >&2
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
fi
size=$(docker image inspect --format '{{.Size}}' "$name")
echo "image-build: $name: $((size / 1000000)) MB uncompressed, built in $((SECONDS - t0)) s" >&2
echo "$name"
