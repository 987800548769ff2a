#!/usr/bin/env bash
# Install the Debian 12 packages ctrain's builds and tests use, then Apptainer (apptainer.sh).
# Run as root (or with sudo). Skips apt entirely when everything is already present, so warm runs
# cost nothing.
set -euo pipefail

packages=(
    slurm-wlm munge                         # one-node Slurm for the real job tests
    openmpi-bin libopenmpi-dev              # mpirun and headers for Horovod's MPI controller
    mpich                                   # MPICH's Hydra (mpiexec.hydra), the other MPI family's launcher; Open MPI stays mpirun
    cmake g++ make git                      # Horovod's source build
    docker.io docker-registry               # the Docker runtime and a local registry on 127.0.0.1
    debootstrap e2fsprogs squashfs-tools    # local base images and Apptainer's root, ext3 overlays
    busybox-static                          # a tiny static image for the docker pull tests
    shellcheck procps iproute2 python3-venv
    python3-click                           # ctrain's core on Debian's own Python (tests run it as a plain user)
    podman crun fuse-overlayfs uidmap       # the podman runtime (rootful in the tests; rootless needs uidmap)
    runc tini                               # podman here: runc (crun refuses hybrid cgroups), tini-static as its init
    charliecloud-runtime charliecloud-builders  # ch-run, ch-convert, ch-image: the unprivileged HPC runtime
)

missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "system-packages: all present"
elif [ "$(id -u)" -ne 0 ]; then
    echo "system-packages: missing ${missing[*]}. Fix: run as root: sudo scripts/system-packages.sh" >&2
    exit 1
else
    echo "system-packages: installing ${missing[*]}"
    # An apt run killed midway leaves packages half-configured, and apt-get then refuses every
    # install until dpkg has finished them.
    DEBIAN_FRONTEND=noninteractive dpkg --configure -a
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Apptainer is not in Debian 12: Debian's sid package in a Debian 13 root (needs debootstrap above).
"$(dirname "${BASH_SOURCE[0]}")/apptainer.sh"
