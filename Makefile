# nri-cpumgr: two commands on a fresh machine (root, Debian 12):
#   make demo   set everything up, run a real containerd + the plugin + the docs' example pods
#   make test   set everything up and run every test (unit, conformance, real-containerd e2e,
#               the single-node cluster e2e, the QEMU guest fast subset on cgroup v2)
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup venv runtime proto proto-check lint test unit e2e e2e-vm cluster cluster-e2e demo \
        bench clean clean-cache oracle differential

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

runtime:
	bash scripts/fetch-runtime.sh

setup: venv runtime

proto: venv
	$(PY) scripts/gen_proto.py

proto-check: venv
	$(PY) scripts/gen_proto.py --check

lint: venv
	$(PY) -m ruff check nri_cpumgr tests benchmarks scripts

unit: setup
	$(PY) -m pytest -q tests/unit tests/conformance

e2e: setup
	$(PY) -m pytest -q tests/e2e

# Kubernetes 1.20.2 built from Debian's source package, cached outside the checkout
# (scripts/cluster/build.sh: 8-15 min the first time on 2 cores, nothing after)
cluster:
	bash scripts/cluster/build.sh >/dev/null

cluster-e2e: setup cluster
	$(PY) -m pytest -q tests/cluster

# The kubelet oracle (oracle/: the kubelet's own managers, k8s.io/kubernetes as a Go module),
# built outside the checkout; the release is KUBERNETES_VERSION (default: oracle/KUBERNETES_VERSION)
oracle:
	bash scripts/build-oracle.sh

# seeded random scenarios, the kubelet vs the plugin (DIFFERENTIAL_MINUTES, DIFFERENTIAL_SEED)
DIFFERENTIAL_MINUTES ?= 5
DIFFERENTIAL_SEED ?= 1
differential: venv oracle
	$(PY) scripts/differential.py --minutes $(DIFFERENTIAL_MINUTES) --seed $(DIFFERENTIAL_SEED)

# NRI_E2E_VM=1: includes the QEMU guest fast subset (tests/vm: cgroup v2, both drivers)
test: setup lint cluster oracle
	NRI_E2E_VM=1 $(PY) -m pytest tests

# the QEMU guest matrix (cgroup v2, every topology of tests/vm/topologies, containerd 2.1 + 1.7)
e2e-vm: setup
	nice -n 10 $(PY) scripts/vm/e2e_vm.py

demo: setup
	$(PY) scripts/demo.py

bench: setup
	$(PY) benchmarks/run_all.py

clean:
	VENV=$(VENV) bash scripts/clean.sh

# also the caches outside the checkout that every checkout shares (cluster binaries, guests)
clean-cache:
	VENV=$(VENV) bash scripts/clean.sh --cache
