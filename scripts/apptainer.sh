#!/usr/bin/env bash
# Install real Apptainer (Debian's package, pinned) as /usr/local/bin/apptainer. Run as root;
# `make system` calls it last. A second run only checks (well under a second).
#
# Debian 13 or newer (glibc >= 2.38): `apt-get install apptainer=$APPTAINER_VERSION`, if the
# system's apt sources have it. Debian 12 (glibc 2.36; the package needs >= 2.38):
#   1. a minimal Debian 13 (trixie) root at $ROOT, made with debootstrap from the Debian mirror
#      that the system's apt sources name (or $DEBIAN_MIRROR);
#   2. the apptainer deb fetched from sid with a separate apt configuration under $APT_DIR
#      (own sources list, lists and cache: the system's apt sources and lists stay untouched);
#   3. installed in the root with the helpers it runs (fuse2fs, squashfuse, squashfs-tools, ...);
#   4. scripts/apptainer-enter.sh installed as /usr/local/bin/apptainer: it enters the root in a
#      private mount namespace (host directories bound in) and execs the root's apptainer.
# The root is built in a temporary directory next to $ROOT and renamed into place last, with a
# marker ($MARKER, the version) inside: a killed run leaves no half root behind.
# No `singularity` wrapper: ctrain's tests use that name for a stand-in.
set -euo pipefail

APPTAINER_VERSION=1.4.5-2
APPTAINER_HOME=/opt/ctrain/apptainer
ROOT=$APPTAINER_HOME/root
APT_DIR=$APPTAINER_HOME/apt
MARKER=$ROOT/.ctrain-apptainer-version
WRAPPER=/usr/local/bin/apptainer
ENTER=$(dirname "${BASH_SOURCE[0]}")/apptainer-enter.sh
ROOT_SUITE=trixie
DEB_SUITE=sid
# In the root besides the deb (whose Depends bring squashfs-tools, uidmap, ca-certificates,
# containernetworking-plugins): ext3 overlays (e2fsprogs: mkfs.ext3 -d; fuse2fs) and SIF mounts
# through FUSE (squashfuse).
ROOT_PACKAGES=(e2fsprogs fuse2fs squashfuse squashfs-tools uidmap ca-certificates)
# Mount points the wrapper needs before it runs once as root (which makes one for each top-level
# directory of the host, see mount_points); a plain user cannot create them.
MOUNT_POINTS=(.oldroot var/tmp var/spool)
# Files the wrapper binds over the root's own (a bind needs an existing target).
BIND_FILES=(etc/passwd etc/group etc/subuid etc/subgid etc/hosts etc/resolv.conf)
# apptainer.conf settings (key = value), each for a reason:
#  - root default capabilities = no: as root this sandbox lacks CAP_SYS_RESOURCE in its bounding
#    set, and the default (full) fails every root exec with "Requesting capability set
#    0x1ffffffffff while permitted capability set is 0x1fffeffffff". It does not cover a
#    build's %post, which still asks for every capability: as root, build a definition file with
#    --fakeroot (root_subids below); a plain user builds with --ignore-subuid (in the wrapper's
#    user namespace newuidmap is not owned by root).
# Left at their defaults, having been checked: `mount hostfs = no` (would bind every mount of the
# wrapper's view into containers), `bind path = /etc/localtime` and `/etc/hosts` (the wrapper
# binds the host's /etc/hosts over the root's, so containers see the host's), `mount devpts =
# yes` (a new devpts instance works here), `mount proc/sys/dev/home/tmp = yes`.
CONF_SETTINGS=("root default capabilities = no")

log() { echo "apptainer: $*"; }
die() {
    echo "apptainer: $*" >&2
    exit 1
}

conf_ok() {
    local conf=$1 setting
    [ -f "$conf" ] || return 1
    for setting in "${CONF_SETTINGS[@]}"; do
        grep -qxF "$setting" "$conf" || return 1
    done
}

# Set each of CONF_SETTINGS in CONF: replace the active `key = ...` line, or append one.
configure() {
    local conf=$1 setting key
    for setting in "${CONF_SETTINGS[@]}"; do
        key=${setting%% = *}
        if grep -q "^$key = " "$conf"; then
            sed -i "s/^$key = .*/$setting/" "$conf"
        else
            printf '%s\n' "$setting" >>"$conf"
        fi
    done
}

glibc_at_least() {
    local have
    have=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
    [ "$(printf '%s\n%s\n' "$1" "$have" | sort -V | head -n1)" = "$1" ]
}

# The Debian mirror of this system's own release, as apt's sources name it.
debian_mirror() {
    local codename url
    if [ -n "${DEBIAN_MIRROR:-}" ]; then
        echo "$DEBIAN_MIRROR"
        return
    fi
    # shellcheck source=/dev/null
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    # shellcheck disable=SC2016  # apt's own $(FIELD) format
    url=$(apt-get indextargets --no-release-info --format '$(SITE) $(RELEASE)' \
        'Identifier: Packages' | awk -v c="$codename" '$2 == c {print $1; exit}')
    [ -n "$url" ] || die "no apt source for Debian $codename. Fix: set DEBIAN_MIRROR (its URL)"
    echo "$url"
}

# Run CMD... chrooted in DIR, in a private mount namespace with the host's /proc /sys /dev bound:
# the mounts vanish with the namespace, even when this script is killed.
in_root() {
    local dir=$1
    shift
    # shellcheck disable=SC2016  # expanded by the inner sh
    unshare --mount --propagation private sh -c '
        dir=$1; shift
        for d in proc sys dev; do mount --rbind "/$d" "$dir/$d"; done
        exec chroot "$dir" "$@"' sh "$dir" \
        env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}

# apt-get with the separate configuration under $APT_DIR (sources: $DEB_SUITE only).
apt_deb_suite() {
    apt-get -q \
        -o Dir::Etc::SourceList="$APT_DIR/sources.list" \
        -o Dir::Etc::SourceParts="$APT_DIR/sources.list.d" \
        -o Dir::Etc::PreferencesParts="$APT_DIR/preferences.d" \
        -o Dir::Etc::Preferences="$APT_DIR/preferences" \
        -o Dir::State::Lists="$APT_DIR/lists" \
        -o Dir::Cache="$APT_DIR/cache" \
        "$@"
}

# Download apptainer_$APPTAINER_VERSION_*.deb from $DEB_SUITE into DIR; prints the file's path.
fetch_deb() {
    local dir=$1 mirror=$2
    mkdir -p "$APT_DIR"/{sources.list.d,preferences.d,lists/partial,cache/archives/partial}
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $DEB_SUITE main" \
        >"$APT_DIR/sources.list"
    apt_deb_suite update >&2
    (cd "$dir" && apt_deb_suite download "apptainer=$APPTAINER_VERSION" >&2)
    ls "$dir"/apptainer_*.deb
}

# Build the root in a temporary directory next to $ROOT, then rename it into place.
build_root() {
    local mirror new deb old
    command -v debootstrap >/dev/null || die "debootstrap not found. Fix: make system"
    mirror=$(debian_mirror)
    mkdir -p "$APPTAINER_HOME"
    rm -rf --one-file-system "$APPTAINER_HOME"/root.new.* "$APPTAINER_HOME"/root.old.*
    new=$(mktemp -d "$APPTAINER_HOME/root.new.XXXXXX")
    chmod 0755 "$new"  # mktemp made it 0700: the root is entered by every user
    # shellcheck disable=SC2064  # $new is fixed now
    trap "rm -rf --one-file-system '$new' '$new.log'" EXIT
    log "debootstrap $ROOT_SUITE from $mirror (about a minute, once)"
    # In its own mount namespace: the /proc and /sys it mounts in the target never reach the host.
    unshare --mount --propagation private \
        debootstrap --variant=minbase "$ROOT_SUITE" "$new" "$mirror" >"$new.log" 2>&1 ||
        { tail -n 20 "$new.log" >&2; die "debootstrap failed (log above)"; }
    rm -f "$new.log"
    log "fetching apptainer $APPTAINER_VERSION from $DEB_SUITE"
    deb=$(fetch_deb "$new/tmp" "$mirror")
    log "installing ${deb##*/} ${ROOT_PACKAGES[*]} in the root"
    in_root "$new" apt-get -q update >/dev/null
    in_root "$new" apt-get -q install -y --no-install-recommends \
        "/tmp/${deb##*/}" "${ROOT_PACKAGES[@]}" >/dev/null
    in_root "$new" apt-get clean
    rm -rf "$new"/var/lib/apt/lists/* "$deb"
    # shellcheck disable=SC2016  # dpkg-query's own ${Field} format
    in_root "$new" dpkg-query -W -f='${Version}' apptainer | grep -qxF "$APPTAINER_VERSION" ||
        die "apptainer $APPTAINER_VERSION did not install in the root"
    (cd "$new" && mkdir -p "${MOUNT_POINTS[@]}" && touch "${BIND_FILES[@]}")
    configure "$new/etc/apptainer/apptainer.conf"
    echo "$APPTAINER_VERSION" >"$new/${MARKER##*/}"
    if [ -e "$ROOT" ]; then
        old=$APPTAINER_HOME/root.old.$$
        mv "$ROOT" "$old"
    fi
    mv "$new" "$ROOT"
    trap - EXIT
    [ -z "${old:-}" ] || rm -rf --one-file-system "$old"
}

install_root_and_wrapper() {
    if [ "$(cat "$MARKER" 2>/dev/null)" != "$APPTAINER_VERSION" ]; then
        build_root
    fi
    conf_ok "$ROOT/etc/apptainer/apptainer.conf" || configure "$ROOT/etc/apptainer/apptainer.conf"
    grep -qxF "ROOT=$ROOT" "$ENTER" || die "$ENTER does not name ROOT=$ROOT"
    install -m 0755 "$ENTER" "$WRAPPER"
    log "$APPTAINER_VERSION installed: $WRAPPER runs $ROOT/usr/bin/apptainer"
}

# Debian 13 or newer: the package itself, when the system's apt sources carry the pinned version.
install_package() {
    apt-cache madison apptainer 2>/dev/null | awk '{print $3}' | grep -qxF "$APPTAINER_VERSION" ||
        return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "apptainer=$APPTAINER_VERSION" e2fsprogs fuse2fs squashfuse
    configure /etc/apptainer/apptainer.conf
}

# `apptainer build --fakeroot` as root (the way to build a definition whose %post needs every
# capability where root lacks some, as in this sandbox) maps root's subordinate ids: root gets a
# range when it has none (well above the ones useradd hands out).
ROOT_SUBIDS=1000000-1065535
# Each file on its own: a root with ids in one file only gets a range in the other alone.
root_subids() {
    local file flag
    for file in /etc/subuid /etc/subgid; do
        ! grep -q '^root:' "$file" 2>/dev/null || continue
        [ -e "$file" ] || install -m 0644 /dev/null "$file"  # usermod refuses the flag without it
        flag=--add-subuids
        [ "$file" = /etc/subuid ] || flag=--add-subgids
        usermod "$flag" "$ROOT_SUBIDS" root
        log "root's subordinate ids $ROOT_SUBIDS in $file (apptainer build --fakeroot)"
    done
}

# The wrapper binds every top-level directory of the host onto the root's directory of that name,
# which a plain user cannot create: run as root, it makes the ones missing (a directory made since
# the last `make system`, such as a new checkout's, included).
mount_points() {
    "$WRAPPER" --version >/dev/null || die "$WRAPPER --version failed"
}

install_apptainer() {
    if glibc_at_least 2.38; then
        if [ "$(dpkg-query -W -f='${Version}' apptainer 2>/dev/null)" = "$APPTAINER_VERSION" ] &&
            conf_ok /etc/apptainer/apptainer.conf; then
            log "$APPTAINER_VERSION present"
            return
        fi
        [ "$(id -u)" -eq 0 ] || die "not installed. Fix: run as root: sudo $0"
        install_package && return
        log "the apt sources have no apptainer $APPTAINER_VERSION; using a root as on Debian 12"
    fi
    if [ "$(cat "$MARKER" 2>/dev/null)" = "$APPTAINER_VERSION" ] && cmp -s "$ENTER" "$WRAPPER" &&
        conf_ok "$ROOT/etc/apptainer/apptainer.conf"; then
        log "$APPTAINER_VERSION present"
    else
        [ "$(id -u)" -eq 0 ] || die "not installed. Fix: run as root: sudo $0"
        install_root_and_wrapper
    fi
    [ "$(id -u)" -ne 0 ] || mount_points
}

main() {
    if [ "${1:-}" = paths ]; then  # where this script keeps state (scripts/fresh-state.sh)
        printf '%s\n' "$APPTAINER_HOME" "$WRAPPER"
        return
    fi
    install_apptainer
    [ "$(id -u)" -ne 0 ] || root_subids
}

main "$@"
