#!/usr/bin/env bash
# Make a Debian 12 (bookworm) base image for the Docker engine locally with debootstrap, for
# machines that cannot pull from Docker Hub. The root filesystem is cached as a tarball outside
# the repository, so only the first run downloads packages (about 3 minutes); later runs import
# the tarball (seconds) or find the image already present.
#
#   scripts/base-image.sh            prints the image name, ctrain-base:bookworm-<key>
#
# Environment: CTRAIN_IMAGE_CACHE (~/.cache/ctrain/images), DEBIAN_MIRROR (from apt's sources).
set -euo pipefail

packages="python3,python3-venv,python3-pip,python3-click,ca-certificates,procps"
cache=${CTRAIN_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ctrain/images}
mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)}
mirror=${mirror:-http://deb.debian.org/debian}
key=$(printf '%s %s' "$mirror" "$packages" | sha256sum | cut -c1-12)
name="ctrain-base:bookworm-$key"
tarball="$cache/base-bookworm-$key.tar"

if docker image inspect "$name" >/dev/null 2>&1; then
    echo "$name"
    exit 0
fi
command -v debootstrap >/dev/null || {
    echo "base-image: debootstrap not found. Fix: make system" >&2
    exit 1
}

if [ ! -f "$tarball" ]; then
    mkdir -p "$cache"
    root=$(mktemp -d "$cache/.rootfs.XXXXXX")
    trap 'rm -rf "$root" "$tarball.tmp"' EXIT
    echo "base-image: debootstrap bookworm from $mirror (about 3 minutes, once)" >&2
    debootstrap --variant=minbase --include="$packages" bookworm "$root" "$mirror" >&2
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"  # a killed run never leaves a half tarball in the cache
fi

docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    "$tarball" "$name" >&2
echo "$name"
