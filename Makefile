# ctrain: developer and user entry points. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
# The version matrix (src/ctrain/matrix.toml): TF_VERSION picks a TensorFlow of it (the first, the
# newest that passes everything, by default) for install, demo, image and wheelhouse.
MATRIX := $(PYTHON) src/ctrain/matrix.py
TF_VERSION ?= $(shell $(MATRIX) default)
export TF_VERSION
# Every other TensorFlow of the matrix: `make test-matrix` runs the training tests of every launch
# mode (pytest marker `modes`) on each, from its own venv .venv-tfVERSION.
OTHER_TF = $(filter-out $(TF_VERSION),$(shell $(MATRIX) versions))

.PHONY: help system install horovod services services-stop test test-suite test-matrix test-unit lint docs mutation demo clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

system:  ## install the Debian packages ctrain's tests and builds use (root)
	scripts/system-packages.sh

# The venv is made whole or made again: its marker is written last, so a run killed while making
# it (or a venv made by hand) is not taken for a finished one. Only a venv is ever removed.
VENV_MADE := $(VENV)/.ctrain-venv-made
$(VENV_MADE):
	@[ ! -e $(VENV) ] || [ -f $(VENV)/pyvenv.cfg ] || { echo "$(VENV) is not a venv; not removing it. Fix: move it aside, or make install VENV=another-directory" >&2; exit 1; }
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	touch $@

install: $(VENV_MADE)  ## venv .venv with ctrain, TensorFlow TF_VERSION (the matrix's default) and its tf-keras, and Horovod (wheel cached)
	$(MATRIX) constraints $(TF_VERSION) cpu >$(VENV)/ctrain-constraints.txt
	@# A venv made when the distribution was named ctrain holds it beside ctrain-hpc: one owner.
	$(VPY) -m pip uninstall --quiet --quiet --yes ctrain
	$(VPY) -m pip install --quiet -c $(VENV)/ctrain-constraints.txt -e '.[train,dev]'
	$(VPY) -m pip install --quiet $$(docker/install.sh horovod-deps)
	wheel=$$(scripts/horovod-wheel.sh $(VPY)) && \
	  $(VPY) -m pip install --quiet --no-deps --force-reinstall "$$wheel"
	scripts/check-horovod-build.sh --patches patches/horovod-$$($(MATRIX) get $(TF_VERSION) horovod) \
	  --allreduce $(VENV)/bin/horovodrun TensorFlow MPI Gloo

horovod: $(VENV_MADE)  ## build (or reuse) the cached Horovod wheel
	scripts/horovod-wheel.sh $(VPY)

# NODES=N compute hosts cn01..cnNN (partition `cluster`, docs/cluster.md) beside the one-node
# partition `debug`: 3 by default, as many as the multi-node tests use; NODES=0 for none.
NODES ?= 3
services:  ## start munge, slurmctld + slurmd (partition debug, plus NODES=3 compute hosts), dockerd, a registry (root)
	CTRAIN_SERVICES_NODES=$(NODES) scripts/services.sh start

services-stop:  ## stop what `make services` started (and remove its compute hosts)
	scripts/services.sh stop

# README's test command ends here, and so does CI (.ci/run is `make system install services test`
# with CI=true). Each part runs even when one before it failed, and any failure fails the whole.
test:  ## lint, all tests on TF_VERSION (unit and real Slurm, MPI, Docker, TensorFlow, Horovod), then test-matrix
	@rc=0; for part in lint docs test-suite test-matrix; do \
	  echo "== make $$part: start $$(date -u +%FT%TZ)"; \
	  $(MAKE) --no-print-directory $$part || rc=$$?; \
	  echo "== make $$part: end $$(date -u +%FT%TZ)"; \
	done; exit $$rc

# The site from docs/ and mkdocs.yml into build/site (a few seconds). Warnings are errors: a
# link to a missing page or anchor, an absolute link, a page outside the nav. The reference
# pages are generated from the code as it builds (scripts/docs-reference.py).
docs:  ## build the documentation site into build/site with mkdocs --strict (broken links fail)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

test-suite:  ## all tests on TF_VERSION only
	$(VPY) -m pytest -ra --durations=0 --durations-min=5 tests

test-matrix:  ## the training tests of every launch mode (marker `modes`) on every other TensorFlow of the matrix
	@set -e; for tf in $(OTHER_TF); do \
	  echo "== test-matrix: TensorFlow $$tf in .venv-tf$$tf"; \
	  $(MAKE) --no-print-directory install VENV=.venv-tf$$tf TF_VERSION=$$tf; \
	  .venv-tf$$tf/bin/python -m pytest -ra -m modes tests/integration; \
	done

test-unit:  ## unit tests only (no services needed)
	$(VPY) -m pytest -ra tests/unit

# Every tracked shell file: scripts, .ci/run, the job templates (jobs/ links to src/ctrain/jobs)
# and the golden rendered job scripts.
SHELL_FILES = $(shell git ls-files '*.sh' '*.sbatch' .ci/run src/ctrain/container/bin/ctrain)

lint:  ## ruff check and format, mypy --strict on src, shellcheck on every tracked shell file, actionlint on the workflows
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy
	shellcheck $(SHELL_FILES)
	$(VENV)/bin/actionlint .github/workflows/*.yml

# The pure core by area (mutant-name patterns; the files are [tool.mutmut] source_paths). Of
# images/overlay.py and util/fs.py only the size parsing and formatting functions.
MUTANTS_launch = ctrain.launch.* ctrain.profile_window.*
MUTANTS_container = ctrain.container.* ctrain.releases.* ctrain.references.* ctrain.util.envpairs.*
MUTANTS_images = ctrain.images.record.* ctrain.images.sif_header.* \
  ctrain.images.stores.sif.x_sif_pull_argv__* ctrain.images.stores.sif.x_sif_inspect_argv__* ctrain.images.stores.sif.x_sif_state__* \
  ctrain.images.overlay.x_parse_size__* \
  ctrain.images.overlay.x_parse_inodes__* ctrain.images.overlay.x_max_inodes__* ctrain.util.fs.x_human__*
MUTANTS_settings = ctrain.settings.* ctrain.settings_table.*
MUTANTS_train = ctrain.train.breakdown.*
AREA ?= launch container images settings train
MUTANTS = $(foreach area,$(AREA),$(or $(MUTANTS_$(area)),$(error unknown AREA $(area))))

mutation:  ## mutation testing of the pure core against tests/unit (mutmut; ~12 min; AREA=launch|container|images|settings|train for some)
	rm -rf mutants
	set -o pipefail; $(VENV)/bin/mutmut run --max-children 2 $(foreach m,$(MUTANTS),'$(m)') 2>&1 | grep -av __mutmut_
	$(VPY) scripts/mutation-report.py $(foreach m,$(MUTANTS),'$(m)')

demo: system install services  ## fresh machine to a 2-worker training on the embedded data
	@echo "== ctrain demo: 2 workers under srun on the local Slurm, embedded synthetic digits"
	srun -n 2 -t 15 --kill-on-bad-exit=1 --export=ALL,PATH=$(CURDIR)/$(VENV)/bin:$$PATH,OMP_NUM_THREADS=1 \
	  $(VENV)/bin/ctrain launch -- $(VPY) examples/mnist_cnn.py --out runs/demo

.PHONY: bench
bench:  ## measure ctrain's overheads, scaling and scripts against its API here (SECTIONS=scaling,... for some; needs install, services)
	$(VPY) benchmarks/run.py --out runs/bench $(if $(SECTIONS),--only $(SECTIONS))

# ---- Images (docs/images.md): Dockerfile.gpu and definitions/*.def both run docker/install.sh.
# FLAVOUR gpu|cpu for wheelhouse, sif and push; TF_VERSION (the matrix's default) for wheelhouse,
# image, image-cpu, sif and push; REGISTRY host[:port][/namespace] for push; TAG (ctrain's version
# by default). Images of the default TensorFlow are $(IMAGE_NAME):$(TAG) (GPU) and
# $(IMAGE_NAME):$(TAG)-cpu, of another $(IMAGE_NAME):$(TAG)-tf$(TF_VERSION)[-cpu].
FLAVOUR ?= gpu
REGISTRY ?=
IMAGE_NAME ?= ctrain
VERSION := $(shell sed -nE 's/^__version__ = "(.+)"$$/\1/p' src/ctrain/__init__.py)
TAG ?= $(VERSION)
BASE_IMAGE ?=
WHEELHOUSE ?= build/wheelhouse
SIF_DIR ?= build
APPTAINER ?= $(shell command -v apptainer)
APPTAINER_BUILD_FLAGS ?=
CTRAIN ?= $(if $(wildcard $(VENV)/bin/ctrain),$(VENV)/bin/ctrain,ctrain)
# image_tag FLAVOUR: the tag of the FLAVOUR image of TF_VERSION
image_tag = $(TAG)$(if $(filter-out $(shell $(MATRIX) default),$(TF_VERSION)),-tf$(TF_VERSION))$(if $(filter cpu,$(1)),-cpu)
image_ref = $(IMAGE_NAME):$(call image_tag,$(1))
sif_file = $(SIF_DIR)/$(IMAGE_NAME)-$(call image_tag,$(1)).sif
# build_args FLAVOUR: the Apptainer build-arg file of the FLAVOUR definition for TF_VERSION
build_args = build/pins-$(1)-tf$(TF_VERSION).env
export BASE_IMAGE WHEELHOUSE

.PHONY: wheelhouse image image-cpu image-gpu-or-cpu sif push

wheelhouse:  ## every Python package of the FLAVOUR image of TF_VERSION (+ Horovod), from PyPI, for --no-index builds
	scripts/wheelhouse.sh $(FLAVOUR) $(WHEELHOUSE)

image:  ## GPU image: SIF (definitions/ctrain-gpu.def) with apptainer, else Docker (Dockerfile.gpu)
	$(MAKE) --no-print-directory image-gpu-or-cpu IMAGE_FLAVOUR=gpu

image-cpu:  ## CPU image from the same recipe: SIF with apptainer, else Docker
	$(MAKE) --no-print-directory image-gpu-or-cpu IMAGE_FLAVOUR=cpu

# With apptainer, scripts/sif-build.sh (definitions/, the pins as --build-arg-file); else Docker,
# scripts/image-build.sh (Dockerfile.gpu).
image-gpu-or-cpu:
	@if [ -n "$(APPTAINER)" ]; then \
	  APPTAINER='$(APPTAINER)' APPTAINER_BUILD_FLAGS='$(APPTAINER_BUILD_FLAGS)' CTRAIN_VERSION=$(VERSION) \
	    PYTHON='$(PYTHON)' scripts/sif-build.sh $(IMAGE_FLAVOUR) $(call sif_file,$(IMAGE_FLAVOUR)) $(call build_args,$(IMAGE_FLAVOUR)); \
	else \
	  scripts/image-build.sh $(IMAGE_FLAVOUR) $(call image_ref,$(IMAGE_FLAVOUR)); \
	fi

sif:  ## the FLAVOUR Docker image of TF_VERSION as a SIF (apptainer, docker-daemon://): build/ctrain-TAG[-tfVERSION][-cpu].sif
	@[ -n "$(APPTAINER)" ] || { echo "sif: apptainer not found; build where it is installed, or pull the pushed image with \`ctrain pull\`" >&2; exit 1; }
	mkdir -p $(SIF_DIR)
	$(APPTAINER) build $(APPTAINER_BUILD_FLAGS) --force --build-arg IMAGE=$(call image_ref,$(FLAVOUR)) \
	  $(call sif_file,$(FLAVOUR)).new definitions/from-docker.def
	mv -f $(call sif_file,$(FLAVOUR)).new $(call sif_file,$(FLAVOUR))

push:  ## push the FLAVOUR image to REGISTRY: ctrain push (Docker's API), and apptainer push oras:// for its SIF
	@[ -n "$(REGISTRY)" ] || { echo "push: set REGISTRY=host[:port][/namespace], e.g. make push REGISTRY=127.0.0.1:5000" >&2; exit 1; }
	@set -e; if [ -n "$(APPTAINER)" ] && [ -f $(call sif_file,$(FLAVOUR)) ]; then \
	  (set -x; $(APPTAINER) push $(call sif_file,$(FLAVOUR)) oras://$(REGISTRY)/$(call image_ref,$(FLAVOUR))-sif); \
	  $(CTRAIN) push --if-present $(call image_ref,$(FLAVOUR)) $(REGISTRY)/$(call image_ref,$(FLAVOUR)); \
	else \
	  $(CTRAIN) push $(call image_ref,$(FLAVOUR)) $(REGISTRY)/$(call image_ref,$(FLAVOUR)); \
	fi

clean:  ## remove the venv and build leftovers (the Horovod wheel cache stays)
	rm -rf $(VENV) $(foreach tf,$(OTHER_TF),.venv-tf$(tf)) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache mutants
