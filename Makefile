# ctrain: developer and user entry points. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
HOROVOD_VERSION ?= 0.28.1
export HOROVOD_VERSION

.PHONY: help system install horovod services services-stop test test-unit lint demo clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

system:  ## install the Debian packages ctrain's tests and builds use (root)
	scripts/system-packages.sh

$(VPY):
	$(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip

install: $(VPY)  ## venv .venv with ctrain, the training extras and Horovod (wheel cached)
	$(VPY) -m pip install --quiet -e '.[train,dev]'
	wheel=$$(scripts/horovod-wheel.sh $(VPY)) && \
	  $(VPY) -m pip install --quiet --no-deps "$$wheel" cloudpickle psutil pyyaml packaging
	scripts/check-horovod-build.sh $(VENV)/bin/horovodrun TensorFlow MPI Gloo

horovod: $(VPY)  ## build (or reuse) the cached Horovod wheel
	scripts/horovod-wheel.sh $(VPY)

services:  ## start munge, slurmctld + slurmd (one node) and dockerd (root)
	scripts/services.sh start

services-stop:  ## stop what `make services` started
	scripts/services.sh stop

test:  ## all tests: unit and real Slurm, MPI, Docker, TensorFlow, Horovod
	$(VPY) -m pytest -ra tests

test-unit:  ## unit tests only (no services needed)
	$(VPY) -m pytest -ra tests/unit

lint:  ## ruff, mypy on src, shellcheck on shell files
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests
	$(VENV)/bin/mypy
	shellcheck $$(git ls-files '*.sh' .ci/run)

demo: system install services  ## fresh machine to a 2-worker training on the embedded data
	@echo "== ctrain demo: 2 workers under srun on the local Slurm, embedded synthetic digits"
	srun -n 2 -t 15 --kill-on-bad-exit=1 --export=ALL,PATH=$(CURDIR)/$(VENV)/bin:$$PATH,OMP_NUM_THREADS=1 \
	  $(VENV)/bin/ctrain launch -- $(VPY) examples/mnist_cnn.py --out runs/demo

clean:  ## remove the venv and build leftovers (the Horovod wheel cache stays)
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
