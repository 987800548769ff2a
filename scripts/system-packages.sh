#!/usr/bin/env bash
# Install the Debian 12 packages ctrain's builds and tests use, the PAM service of the tests' login
# node, then Apptainer (apptainer.sh). Run as root (or with sudo). Skips apt entirely when
# everything is already present, so warm runs cost nothing.
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
    openssh-server rsync libpam-oath oathtool   # the tests' login node: sshd on 127.0.0.1 with a TOTP second factor
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
    # Installing openssh-server enables the distribution's sshd on port 22 and starts it where
    # systemd runs (not where a policy-rc.d forbids it, as in a Docker image). The tests start
    # their own (tests/support/login_node.py), so one installed here is stopped and disabled;
    # an sshd installed before (the machine's own way in) is left alone.
    if [[ " ${missing[*]} " == *" openssh-server "* ]]; then
        echo "system-packages: stopping and disabling the ssh service openssh-server brings"
        if [ -d /run/systemd/system ]; then
            systemctl stop ssh.socket ssh.service
        else
            service ssh stop
        fi
        systemctl disable --quiet ssh.service  # offline where systemd does not run: its links
        update-rc.d ssh disable                # the init script's, for an init without systemd
    fi
fi

# The PAM service of the tests' login node: sshd run under the name ctrain-test-sshd reads
# /etc/pam.d/ctrain-test-sshd. sshd checks the public key itself (AuthenticationMethods
# publickey,keyboard-interactive); PAM then asks for nothing but a time-based code of the users
# file the tests write for their sshd alone, in its own mount namespace, at the path below. The
# window is wide: each login takes the next unused code, ahead of the clock when logins come
# faster than one in 30 s.
PAM_SERVICE=/etc/pam.d/ctrain-test-sshd
pam_text=$(cat <<'EOF'
# Written by ctrain scripts/system-packages.sh for the tests' login node
# (tests/support/login_node.py); rewritten when it differs.
auth     required  pam_oath.so usersfile=/run/ctrain-test-sshd/users.oath window=120
@include common-account
@include common-session
@include common-password
EOF
)
if [ -f "$PAM_SERVICE" ] && [ "$(cat "$PAM_SERVICE")" = "$pam_text" ]; then
    :
elif [ "$(id -u)" -ne 0 ]; then
    echo "system-packages: $PAM_SERVICE is missing or out of date. Fix: run as root: sudo scripts/system-packages.sh" >&2
    exit 1
else
    echo "system-packages: writing $PAM_SERVICE"
    printf '%s\n' "$pam_text" >"$PAM_SERVICE.new"
    mv -f "$PAM_SERVICE.new" "$PAM_SERVICE"
fi

# Apptainer is not in Debian 12: Debian's sid package in a Debian 13 root (needs debootstrap above).
"$(dirname "${BASH_SOURCE[0]}")/apptainer.sh"
