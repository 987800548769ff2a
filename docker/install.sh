#!/usr/bin/env bash
# The one install recipe of ctrain's images. Dockerfile.gpu runs it step by step (one layer each);
# the Apptainer definitions in definitions/ run `install.sh all` in %post. Nothing is installed
# anywhere else, so the Docker and Apptainer images cannot drift apart.
#
#   install.sh system          Debian packages the image runs with (Python, OpenMPI, CA certs)
#   install.sh python          venv with TensorFlow, tf-keras, tensorflow-datasets and Horovod,
#                              from the wheelhouse only (pip --no-index); Horovod from a prebuilt
#                              wheel in the wheelhouse, else built here from the wheelhouse's sdist
#                              (ctrain's patch set already applied: docs/horovod-patches.md; the
#                              build tools, and for the GPU flavour Debian's nvcc, are removed)
#   install.sh ctrain          ctrain from its wheel
#   install.sh verify          installed versions == pins; `horovodrun --check-build` gate
#                              (TensorFlow, MPI, Gloo; NCCL too for gpu); gpu: Horovod's ops load
#                              beside TensorFlow's CUDA 12 libraries; a 2-rank allreduce under
#                              mpirun and under horovodrun --gloo
#   install.sh clean           apt lists and caches
#   install.sh all             system python ctrain verify clean
#   install.sh requirements    print the Python requirements of FLAVOUR (used by the wheelhouse)
#   install.sh horovod-deps    print Horovod's runtime dependencies, a name a line (its wheel is
#                              installed --no-deps here, by `make install` and by
#                              scripts/horovod-wheel.sh: this list is their one home)
#
# Environment (the Dockerfile's ARGs; the definitions export the same values):
#   FLAVOUR              gpu | cpu
#   TF_VERSION KERAS_VERSION TFDS_VERSION HOROVOD_VERSION OPENMPI_VERSION CTRAIN_VERSION
#   CUDA_VERSION CUDNN_VERSION NCCL_VERSION      gpu: the CUDA 12 wheels TensorFlow pins; cpu: none
#   HOROVOD_NVCC_VERSION gpu: Debian's nvidia-cuda-toolkit that compiles Horovod's kernels
#   CTRAIN_VENV          /opt/ctrain/venv
#   WHEELHOUSE           /wheelhouse         (third-party wheels, Horovod wheel or sdist)
#   CTRAIN_WHEELS        /wheelhouse-ctrain  (ctrain's wheel)
#   CA_BUNDLE            /run/secrets/ca_bundle: a site's CA bundle for a TLS-inspecting proxy,
#                        used by apt and pip while installing and never copied into the image
#   DEBIAN_MIRROR        Debian mirror for the contrib/non-free CUDA toolkit (default: the
#                        image's first apt source)
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 PIP_DISABLE_PIP_VERSION_CHECK=1

# In a finished image, `install.sh verify` re-checks it with the pins the build recorded.
PINS_FILE=/opt/ctrain/versions.env
if [ -z "${FLAVOUR:-}" ] && [ -r "$PINS_FILE" ]; then
    # shellcheck source=/dev/null
    . "$PINS_FILE"
fi
CTRAIN_VENV=${CTRAIN_VENV:-/opt/ctrain/venv}
WHEELHOUSE=${WHEELHOUSE:-/wheelhouse}
CTRAIN_WHEELS=${CTRAIN_WHEELS:-/wheelhouse-ctrain}
CA_BUNDLE=${CA_BUNDLE:-/run/secrets/ca_bundle}
PY=$CTRAIN_VENV/bin/python

log() { echo "install.sh: $*" >&2; }
die() {
    echo "install.sh: ERROR: $*" >&2
    exit 1
}
need() {
    local name
    for name in "$@"; do
        [ -n "${!name:-}" ] || die "$name is not set (the Dockerfile's ARG / the definition's %post sets it)"
    done
}
flavour() {
    need FLAVOUR
    case "$FLAVOUR" in gpu | cpu) ;; *) die "FLAVOUR=$FLAVOUR; expected gpu or cpu" ;; esac
}

# apt and pip trust the site's CA bundle when one was passed as a build secret. Only options and
# environment variables point at it: the file itself stays in the secret mount.
APT_CONF=()
if [ -s "$CA_BUNDLE" ]; then
    log "using the CA bundle in $CA_BUNDLE for apt and pip"
    APT_CONF+=(-o "Acquire::https::CAInfo=$CA_BUNDLE")
    export PIP_CERT=$CA_BUNDLE REQUESTS_CA_BUNDLE=$CA_BUNDLE SSL_CERT_FILE=$CA_BUNDLE
fi
apt_update() { apt-get -q "${APT_CONF[@]}" update; }
apt_install() { apt-get -q -y --no-install-recommends "${APT_CONF[@]}" install "$@"; }

# Debian packages the images run with. openmpi-bin pulls libopenmpi3 (Horovod's MPI controller).
RUNTIME_PACKAGES=(python3 python3-venv openmpi-bin ca-certificates procps)
# Horovod's source build; the GPU flavour adds Debian's nvcc (HOROVOD_NVCC_VERSION) and the gcc
# it supports.
BUILD_PACKAGES=(cmake make g++ libopenmpi-dev python3-dev)
GPU_BUILD_PACKAGES=(nvidia-cuda-toolkit gcc-11 g++-11)

cmd_requirements() {
    flavour
    need TF_VERSION KERAS_VERSION TFDS_VERSION HOROVOD_VERSION
    if [ "$FLAVOUR" = gpu ]; then
        need CUDA_VERSION CUDNN_VERSION NCCL_VERSION
        echo "tensorflow[and-cuda]==$TF_VERSION"
        # The CUDA 12 wheels the labels name (TensorFlow's and-cuda extra may allow a range)
        echo "nvidia-cuda-runtime-cu12==$CUDA_VERSION"
        echo "nvidia-cudnn-cu12==$CUDNN_VERSION"
        echo "nvidia-nccl-cu12==$NCCL_VERSION"
    else
        echo "tensorflow==$TF_VERSION"
    fi
    echo "tf-keras==$KERAS_VERSION"
    # TensorFlow >= 2.20 no longer pulls TensorBoard (Keras's TensorBoard callback needs it); the
    # wheelhouse holds the matrix's version of it (scripts/wheelhouse.sh's constraints)
    echo tensorboard
    echo "tensorflow-datasets==$TFDS_VERSION"
    # Horovod's runtime dependencies, and the tools its sdist builds with (--no-build-isolation)
    cmd_horovod_deps
    printf '%s\n' setuptools wheel
}

cmd_horovod_deps() { printf '%s\n' cloudpickle psutil pyyaml packaging; }

cmd_system() {
    log "system: ${RUNTIME_PACKAGES[*]}"
    apt_update
    apt_install "${RUNTIME_PACKAGES[@]}"
    rm -rf /var/lib/apt/lists/*
}

# The mirror the image's apt already uses (deb822 or one-line format).
debian_mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then
        echo "$DEBIAN_MIRROR"
        return
    fi
    local found
    found=$(grep -rhoE '^(URIs:[[:space:]]*|deb[[:space:]]+)https?://[^[:space:]]+' \
        /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null \
        | grep -v security | head -n1 | grep -oE 'https?://[^[:space:]]+' || true)
    echo "${found:-http://deb.debian.org/debian}"
}

# Build Horovod from the sdist in the wheelhouse (scripts/wheelhouse.sh applied ctrain's patch
# set to it) against the venv's TensorFlow and Debian's OpenMPI; gpu: with NCCL from
# TensorFlow's nvidia-nccl-cu12 wheel and CUDA kernels from Debian's nvcc.
build_horovod() {
    local out=$1 site nccl
    local -a env=(
        HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
        HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS="-j$(nproc)"
    )
    if [ "$FLAVOUR" = gpu ]; then
        # NCCL of TensorFlow's nvidia-nccl-cu12 wheel: include/nccl.h, lib/libnccl.so.2, and for
        # the link a libnccl.so that the wheel lacks (removed again after the build). The ops'
        # RUNPATH then names this directory, nothing under /tmp.
        site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        nccl=$site/nvidia/nccl
        ln -sfn libnccl.so.2 "$nccl/lib/libnccl.so"
        # The GPU generations of TensorFlow's own wheels (docs/images.md), Pascal to Hopper.
        env+=(
            HOROVOD_GPU=CUDA HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME=/usr
            HOROVOD_NCCL_INCLUDE="$nccl/include" HOROVOD_NCCL_LIB="$nccl/lib" HOROVOD_NCCL_LINK=SHARED
            HOROVOD_BUILD_CUDA_CC_LIST="${HOROVOD_BUILD_CUDA_CC_LIST:-60,70,75,80,86,89,90}"
            CC=gcc-11 CXX=g++-11
        )
    fi
    log "python: building horovod $HOROVOD_VERSION from its sdist ($FLAVOUR; about 5 minutes on 2 cores)"
    env "${env[@]}" "$PY" -m pip wheel --no-index --find-links "$WHEELHOUSE" --no-deps \
        --no-build-isolation --no-cache-dir -w "$out" "horovod==$HOROVOD_VERSION"
    if [ "$FLAVOUR" = gpu ]; then
        rm -f "$nccl/lib/libnccl.so"
        sass_targets "$(find "$out" -name 'horovod-*.whl' -print -quit)"
    fi
}

# Log the GPU architectures compiled into the wheel's TensorFlow ops (cuobjdump, while nvcc's
# toolkit is still installed).
sass_targets() {
    local dir
    dir=$(mktemp -d /tmp/wheel.XXXXXX)
    python3 -m zipfile -e "$1" "$dir"
    log "python: GPU code in Horovod's TensorFlow ops: $(find "$dir" -name 'mpi_lib*.so' \
        -exec cuobjdump --list-elf {} + | grep -oE 'sm_[0-9]+' | sort -u | tr '\n' ' ')"
    rm -rf "$dir"
}

cmd_python() {
    flavour
    need TF_VERSION KERAS_VERSION TFDS_VERSION HOROVOD_VERSION
    [ -d "$WHEELHOUSE" ] || die "no wheelhouse at $WHEELHOUSE. Fix: make wheelhouse"
    local -a pip=("$PY" -m pip install --no-index --find-links "$WHEELHOUSE" --no-cache-dir)
    local reqs prebuilt work before
    log "python: venv $CTRAIN_VENV from $WHEELHOUSE ($(find "$WHEELHOUSE" -maxdepth 1 -type f | wc -l) files)"
    python3 -m venv "$CTRAIN_VENV"
    reqs=$(mktemp /tmp/requirements.XXXXXX)
    cmd_requirements >"$reqs"
    "${pip[@]}" -r "$reqs"
    rm -f "$reqs"

    work=$(mktemp -d /tmp/horovod.XXXXXX)
    # A Horovod wheel in the wheelhouse is used as it is for cpu (`make wheelhouse` puts the host's
    # cached one there: same Debian 12 OpenMPI, same TensorFlow wheel, same cp311 ABI). The
    # GPU flavour is always built here: it needs nvcc and NCCL, which the host does not have.
    prebuilt=$(find "$WHEELHOUSE" -maxdepth 1 -name "horovod-${HOROVOD_VERSION}-cp*.whl" -print -quit)
    if [ "$FLAVOUR" = cpu ] && [ -n "$prebuilt" ]; then
        log "python: horovod from the prebuilt $(basename "$prebuilt")"
        cp "$prebuilt" "$work/"
    else
        before=$(mktemp /tmp/dpkg-before.XXXXXX)
        dpkg-query -W -f='${Package}\n' | sort >"$before"
        if [ "$FLAVOUR" = gpu ]; then
            need HOROVOD_NVCC_VERSION
            # Debian's nvidia-cuda-toolkit (nvcc) lives in contrib/non-free.
            echo "deb $(debian_mirror) bookworm main contrib non-free" >/etc/apt/sources.list.d/ctrain-cuda.list
        fi
        apt_update
        if [ "$FLAVOUR" = gpu ]; then
            apt_install "${BUILD_PACKAGES[@]}" "${GPU_BUILD_PACKAGES[@]}"
            nvcc --version | tail -n2 >&2
            nvcc --version | grep -q "release ${HOROVOD_NVCC_VERSION}," \
                || die "nvcc is not release ${HOROVOD_NVCC_VERSION}"
        else
            apt_install "${BUILD_PACKAGES[@]}"
        fi
        build_horovod "$work"
        # Remove exactly what the build added (compilers, headers, the CUDA toolkit).
        dpkg-query -W -f='${Package}\n' | sort | comm -13 "$before" - | xargs -r apt-get purge -q -y >/dev/null
        rm -f "$before" /etc/apt/sources.list.d/ctrain-cuda.list
        rm -rf /var/lib/apt/lists/*
    fi
    "${pip[@]}" "$(find "$work" -name 'horovod-*.whl' -print -quit)"
    rm -rf "$work"
    [ "$FLAVOUR" = cpu ] || cuda_loader_config
}

# The loader finds every CUDA library of the venv's nvidia-* wheels by name: TensorFlow dlopens
# them by name, and its run paths name only some (docs/images.md). The image's own loader
# configuration, not LD_LIBRARY_PATH, which a container runtime may replace (Apptainer's --nv).
CUDA_LOADER_CONF=/etc/ld.so.conf.d/ctrain-cuda.conf
cuda_loader_config() {
    local site
    site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    find "$site/nvidia" -mindepth 2 -maxdepth 2 -type d -name lib | sort >"$CUDA_LOADER_CONF"
    ldconfig
    log "python: $CUDA_LOADER_CONF: $(wc -l <"$CUDA_LOADER_CONF") CUDA library directories"
}

cmd_ctrain() {
    need CTRAIN_VERSION
    [ -x "$PY" ] || die "no venv at $CTRAIN_VENV. Fix: install.sh python first"
    log "ctrain $CTRAIN_VERSION from $CTRAIN_WHEELS"
    "$PY" -m pip install --no-index --no-cache-dir --find-links "$CTRAIN_WHEELS" \
        --find-links "$WHEELHOUSE" "ctrain-hpc==$CTRAIN_VERSION"
    ln -sf "$CTRAIN_VENV/bin/ctrain" /usr/local/bin/ctrain
}

# version DIST: the installed version of a Python distribution in the venv
version() { "$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$1"; }

check_equal() {
    local what=$1 want=$2 got=$3
    if [ "$got" != "$want" ]; then
        die "$what is $got but the recipe pins $want (labels would lie). Fix: make the pins agree"
    fi
    log "verify: $what $got"
}

# Horovod's TensorFlow ops load beside TensorFlow's CUDA 12 libraries, every symbol bound at load
# (LD_BIND_NOW): each CUDA runtime symbol they use must come from TensorFlow's cudart stubs (so
# TensorFlow's libcudart.so.12 serves them: one CUDA runtime in the process; Debian's nvcc only
# compiled the kernels' device code), each NCCL symbol from the nvidia-nccl-cu12 wheel's
# libnccl.so.2, of the version Horovod was built against; no RUNPATH under /tmp; an allreduce runs.
gpu_load_proof() {
    LD_BIND_NOW=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$PY" - <<'EOF'
import ctypes, os, struct, sysconfig
import glob

site = sysconfig.get_paths()["purelib"]
import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402

(ops,) = glob.glob(os.path.join(site, "horovod/tensorflow/mpi_lib*.so"))


def undefined(path):
    """Names of the undefined dynamic symbols of an ELF64 shared object."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynsym = next(s for s in sections if s[1] == 11)  # SHT_DYNSYM
    strtab = sections[dynsym[6]]
    names = []
    for off in range(dynsym[4], dynsym[4] + dynsym[5], 24):
        name, _info, _other, shndx = struct.unpack_from("<IBBH", data, off)
        if shndx == 0 and name:
            end = data.index(b"\0", strtab[4] + name)
            names.append(data[strtab[4] + name:end].decode())
    return names


def runpath(path):
    """The DT_RUNPATH / DT_RPATH directories of an ELF64 shared object."""
    data = open(path, "rb").read()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    dynamic = next(s for s in sections if s[1] == 6)  # SHT_DYNAMIC
    strtab = sections[dynamic[6]]
    dirs = []
    for off in range(dynamic[4], dynamic[4] + dynamic[5], 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if tag in (15, 29):  # DT_RPATH, DT_RUNPATH
            end = data.index(b"\0", strtab[4] + val)
            dirs += data[strtab[4] + val:end].decode().split(":")
    return dirs


assert not [d for d in runpath(ops) if d.startswith("/tmp")], runpath(ops)


class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


libc = ctypes.CDLL(None)
lib = ctypes.CDLL(ops)  # already loaded by horovod.tensorflow: the same handle
providers = {}
for name in undefined(ops):
    if not name.startswith(("cuda", "__cuda", "nccl")):
        continue
    addr = ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    info = DlInfo()
    assert libc.dladdr(ctypes.c_void_p(addr), ctypes.byref(info)), name
    providers[name] = os.path.realpath(info.fname.decode())
tf_framework = os.path.realpath(os.path.join(site, "tensorflow", "libtensorflow_framework.so.2"))
nccl_lib = os.path.realpath(os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so.2"))
cuda = {n: p for n, p in providers.items() if not n.startswith("nccl")}
nccl = {n: p for n, p in providers.items() if n.startswith("nccl")}
assert cuda and set(cuda.values()) == {tf_framework}, providers
assert nccl and set(nccl.values()) == {nccl_lib}, providers
# A CUDA runtime call through TensorFlow's stub loads TensorFlow's own libcudart.so.12.
count = ctypes.c_int(-1)
err = getattr(lib, "cudaGetDevice")(ctypes.byref(count))
maps = {line.split()[-1] for line in open("/proc/self/maps") if ".so" in line}
cudart = sorted(p for p in maps if os.path.basename(p).startswith("libcudart"))
assert cudart == [os.path.join(site, "nvidia/cuda_runtime/lib/libcudart.so.12")], cudart
runtime = ctypes.c_int()
assert ctypes.CDLL(nccl_lib).ncclGetVersion(ctypes.byref(runtime)) == 0
built = int(hvd.nccl_built())
assert built == runtime.value, (built, runtime.value)
hvd.init()
assert hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum).numpy().tolist() == [1.0, 2.0]
print(f"install.sh: verify: Horovod's ops ({os.path.basename(ops)}) load beside TensorFlow's CUDA 12 "
      f"libraries: its {len(cuda)} CUDA runtime symbols bind to TensorFlow's cudart stubs "
      f"({tf_framework}), which load {cudart[0]} (cudaGetDevice -> error {err} without a GPU); "
      f"its {len(nccl)} NCCL symbols bind to {nccl_lib}, NCCL {runtime.value}, the version "
      f"Horovod was built against ({built})")
EOF
}

# A 2-rank allreduce under each controller (ctrain.train.allreduce_check): Open MPI's mpirun and
# horovodrun --gloo, on the loopback interface (a build has no other network to rely on).
allreduce_proof() {
    local -a check=("$PY" -m ctrain.train.allreduce_check 2)
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TF_CPP_MIN_LOG_LEVEL=2 \
        mpirun --oversubscribe -np 2 --mca btl self,vader "${check[@]}" >&2 \
        || die "a 2-rank allreduce under mpirun failed (output above)"
    TF_CPP_MIN_LOG_LEVEL=2 "$CTRAIN_VENV/bin/horovodrun" -np 2 -H localhost:2 --gloo \
        --network-interfaces lo "${check[@]}" >&2 \
        || die "a 2-rank allreduce under horovodrun --gloo failed (output above)"
    log "verify: a 2-rank allreduce is right under mpirun and horovodrun --gloo"
}

cmd_verify() {
    flavour
    need TF_VERSION KERAS_VERSION TFDS_VERSION HOROVOD_VERSION OPENMPI_VERSION CTRAIN_VERSION
    need CUDA_VERSION CUDNN_VERSION NCCL_VERSION
    check_equal tensorflow "$TF_VERSION" "$(version tensorflow)"
    check_equal tf-keras "$KERAS_VERSION" "$(version tf-keras)"
    check_equal tensorflow-datasets "$TFDS_VERSION" "$(version tensorflow-datasets)"
    check_equal horovod "$HOROVOD_VERSION" "$(version horovod)"
    check_equal ctrain "$CTRAIN_VERSION" "$(version ctrain-hpc)"
    local ompi
    ompi=$(dpkg-query -W -f='${Version}' openmpi-bin)
    check_equal OpenMPI "$OPENMPI_VERSION" "${ompi%%-*}"
    if [ "$FLAVOUR" = gpu ]; then
        check_equal "CUDA runtime (nvidia-cuda-runtime-cu12)" "$CUDA_VERSION" "$(version nvidia-cuda-runtime-cu12)"
        check_equal "cuDNN (nvidia-cudnn-cu12)" "$CUDNN_VERSION" "$(version nvidia-cudnn-cu12)"
        check_equal "NCCL (nvidia-nccl-cu12)" "$NCCL_VERSION" "$(version nvidia-nccl-cu12)"
    else
        check_equal CUDA none "$CUDA_VERSION"
        check_equal cuDNN none "$CUDNN_VERSION"
        check_equal NCCL none "$NCCL_VERSION"
    fi
    local -a features=(TensorFlow MPI Gloo)
    [ "$FLAVOUR" = cpu ] || features+=(NCCL)
    local report missing=()
    report=$("$CTRAIN_VENV/bin/horovodrun" --check-build)
    echo "$report" >&2
    for feature in "${features[@]}"; do
        grep -qE "\[X\] ${feature}\$" <<<"$report" || missing+=("$feature")
    done
    [ "${#missing[@]}" -eq 0 ] || die "horovodrun --check-build: not built with ${missing[*]}"
    log "verify: horovodrun --check-build marks ${features[*]}"
    if [ "$FLAVOUR" = gpu ]; then
        # Each CUDA library TensorFlow opens, by name, through the loader alone.
        env -u LD_LIBRARY_PATH "$PY" -m ctrain.train.cudalibs --loader >&2 \
            || die "the loader does not find every CUDA library TensorFlow opens (above)"
        log "verify: the loader opens every CUDA library TensorFlow opens, by name"
        gpu_load_proof
    fi
    "$CTRAIN_VENV/bin/ctrain" --version >&2
    allreduce_proof
    local name
    for name in FLAVOUR TF_VERSION KERAS_VERSION TFDS_VERSION HOROVOD_VERSION OPENMPI_VERSION \
        CUDA_VERSION CUDNN_VERSION NCCL_VERSION HOROVOD_NVCC_VERSION CTRAIN_VERSION; do
        echo "export $name=${!name:-}"
    done >"$PINS_FILE"
}

# The venv's byte code stays: a read-only SIF cannot cache it, and every rank imports TensorFlow.
# /tmp is left alone (install.sh removes its own temporary files; a build may bind the host's).
cmd_clean() {
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /root/.cache/pip 2>/dev/null || true
}

main() {
    local step
    [ $# -ge 1 ] || die "usage: install.sh system|python|ctrain|verify|clean|all|requirements|horovod-deps"
    for step in "$@"; do
        case "$step" in
            all) cmd_system && cmd_python && cmd_ctrain && cmd_verify && cmd_clean ;;
            system | python | ctrain | verify | clean | requirements) "cmd_$step" ;;
            horovod-deps) cmd_horovod_deps ;;
            *) die "unknown step $step" ;;
        esac
    done
}

main "$@"
