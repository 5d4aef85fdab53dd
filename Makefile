# nri-cpumgr: two commands on a fresh machine (root, Debian 12):
#   make demo   set everything up, run a real containerd + the plugin + the docs' example pods
#   make test   set everything up, then lint; unit and conformance tests; the differential
#               subset (as deployed and NRI alone) and its mutation test; the docs build; the
#               e2e suite on containerd 1.7 and 2.1; the kubelet 1.37.2 single-node cluster on
#               containerd 2.1 and 2.4; in a QEMU guest on cgroup v2, the fast subset and a
#               real kubelet 1.37.2 on containerd 2.1 and 2.4 judged by the kubelet oracle
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup venv runtime image-venv proto proto-check dataclass-code lint docs docs-serve test unit e2e e2e-vm cluster \
        cluster-e2e \
        demo bench stress clean clean-cache kubelet-cri modern modern-tools chart e2e-2.4 e2e-crio \
        cluster-modern cluster-adopt oracle differential

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,docs]'
	touch $@

runtime:
	bash scripts/fetch-runtime.sh

# the image's interpreter for the benchmarks (issue 34; benchmarks/footprint.py runs the plugin
# on it when it exists): Debian's python3, which the Dockerfile installs, in a virtualenv with
# the plugin's dependencies and this tree (editable), the image's pip (its console script) and
# no setuptools, as the image
IMAGE_VENV := .runtime/image-venv
image-venv: $(IMAGE_VENV)/.installed
$(IMAGE_VENV)/.installed: pyproject.toml
	rm -rf $(IMAGE_VENV)
	/usr/bin/python3 -m venv $(IMAGE_VENV)
	$(IMAGE_VENV)/bin/python -m pip install -q --only-binary=:all: --upgrade 'pip>=25.0'
	$(IMAGE_VENV)/bin/python -m pip install -q -e .
	$(IMAGE_VENV)/bin/python -m pip uninstall -q -y setuptools
	touch $@

setup: venv runtime

proto: venv
	$(PY) scripts/gen_proto.py

proto-check: venv
	$(PY) scripts/gen_proto.py --check

# the start's dataclass methods, compiled once (nri_cpumgr/_dataclass_code.py; issue 34)
dataclass-code: venv
	$(PY) scripts/gen_dataclass_code.py

lint: venv
	$(PY) -m ruff check nri_cpumgr tests benchmarks scripts

# the docs site, strictly (a warning, a broken link or anchor fails), into build/site
# (git-ignored); `make test` builds it too (tests/unit/test_docs_build.py). NO_MKDOCS_2_WARNING:
# mkdocs-material's banner about its successor, printed on every build otherwise.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

# the built site over HTTP on 127.0.0.1:$(DOCS_PORT) (search needs it: from file:// the browser
# refuses the search index request and search hangs at "Initializing search")
DOCS_PORT ?= 8000
docs-serve: docs
	$(PY) -m http.server --bind 127.0.0.1 --directory build/site $(DOCS_PORT)

unit: setup
	$(PY) -m pytest -q tests/unit tests/conformance

e2e: setup
	$(PY) -m pytest -q tests/e2e

# Kubernetes 1.20.2 built from Debian's source package, cached outside the checkout
# (scripts/cluster/build.sh: 8-15 min the first time on 2 cores, nothing after)
cluster:
	bash scripts/cluster/build.sh >/dev/null

# the kubelet v1.37.2's own CRI requests (oracle/cmd/kubelet-cri), built with Go and the module
# proxy, cached outside the checkout (scripts/oracle/build-kubelet-cri.sh); the e2e tests that
# use it build it on first use too
kubelet-cri:
	bash scripts/oracle/build-kubelet-cri.sh

# the kubelet 1.20.2 cluster test (containerd 1.7, CRI v1alpha2); not in `make test`
cluster-e2e: setup cluster
	$(PY) -m pytest -q tests/cluster/test_cluster.py

# The kubelet oracle (oracle/: the kubelet's own managers, k8s.io/kubernetes as a Go module),
# built outside the checkout; the release is KUBERNETES_VERSION (default: oracle/KUBERNETES_VERSION).
# With it, oracle/cmd/kubelet-checkpoint (the kubelet's own checkpoint writers, for the adoption
# tests; scripts/oracle/build-kubelet-checkpoint.sh, seconds after the oracle)
oracle:
	bash scripts/build-oracle.sh
	bash scripts/oracle/build-kubelet-checkpoint.sh >/dev/null

# seeded random scenarios, the kubelet vs the plugin (DIFFERENTIAL_MINUTES, DIFFERENTIAL_SEED,
# DIFFERENTIAL_MODE: as-deployed, the plugin knows each pod's spec, or nri-alone)
DIFFERENTIAL_MINUTES ?= 5
DIFFERENTIAL_SEED ?= 1
DIFFERENTIAL_MODE ?= as-deployed
differential: venv oracle
	$(PY) scripts/differential.py --minutes $(DIFFERENTIAL_MINUTES) --seed $(DIFFERENTIAL_SEED) \
		--mode $(DIFFERENTIAL_MODE)

# The modern node from Go modules (scripts/modern/build.sh, versions in scripts/modern/versions.env):
# kubelet & co. 1.37.2, containerd 2.4.2, runc 1.5.3, crictl, helm; cached machine-wide in
# /var/cache/nri-cpumgr/modern (figures: docs/development/modern-node.md), nothing when built
modern:
	bash scripts/modern/build.sh >/dev/null

# the chart as a chart repository in build/charts (helm package + helm repo index; CHART_URL=
# for absolute URLs in index.yaml): serve the directory and `helm repo add` it (scripts/chart.sh)
chart:
	bash scripts/chart.sh

# helm alone (the chart tests in tests/unit; `make test` builds all of `make modern`)
modern-tools:
	bash scripts/modern/build.sh helm >/dev/null

# the e2e suite on containerd 2.4.2 (+ runc 1.5.3) from the modern build
e2e-2.4: setup
	bash scripts/modern/build.sh containerd runc >/dev/null
	NRI_E2E_CONTAINERD=2.4 $(PY) -m pytest -q tests/e2e

# the e2e suite's core scenarios on CRI-O v1.36.3 from the modern build, with Debian's conmon
# (installed with apt-get when missing) and runc; docs/development/modern-node.md, CRI-O
CRIO_E2E ?= tests/e2e/test_harness.py tests/e2e/test_nri_connection.py \
            tests/e2e/test_static_policy.py tests/e2e/test_shared_pool.py tests/e2e/test_restarts.py \
            tests/e2e/test_shared_pool_default.py tests/e2e/test_pass_races.py
e2e-crio: setup
	command -v conmon >/dev/null || apt-get install -y -qq conmon >/dev/null \
	  || { apt-get update -qq && apt-get install -y -qq conmon >/dev/null; }
	nice -n 10 bash scripts/modern/build.sh crio >/dev/null
	NRI_E2E_CONTAINERD=crio $(PY) -m pytest -q $(CRIO_E2E)

# the kubelet 1.37 cluster test on containerd 2.1 and 2.4
cluster-modern: setup
	bash scripts/modern/build.sh >/dev/null
	NRI_CLUSTER_CONTAINERD=2.1,2.4 $(PY) -m pytest -q tests/cluster/test_modern.py

# the documented migration of a real kubelet 1.37 static-policy node to the plugin alone
# (tests/cluster/test_adopt_modern.py, also in `make test`; one cluster start on the first
# NRI_CLUSTER_CONTAINERD)
cluster-adopt: setup
	bash scripts/modern/build.sh >/dev/null
	nice -n 10 $(PY) -m pytest -q tests/cluster/test_adopt_modern.py

# Every tier of tests/ (the header above): lint, tests/unit (with the docs build,
# test_docs_build.py), tests/conformance, tests/differential (the fixed-seed subset as deployed
# and NRI alone, the regressions, the mutation test), tests/e2e on containerd 1.7 and 2.1
# (NRI_E2E_CONTAINERD), tests/cluster and tests/vm.
# NRI_E2E_VM=1: includes the QEMU guest fast subset (tests/vm: cgroup v2, both drivers; then
# the live reconfiguration with running containers, cgroupfs, issue 35) and the
# real kubelet 1.37.2 in the guest on containerd 2.1 and 2.4 (tests/vm/test_guest_kubelet.py,
# judged against the oracle's answers for its pods; NRI_E2E_VM_KUBELET=0 leaves it out).
# modern: the kubelet 1.37.2 & co., containerd 2.4.2, runc 1.5.3, crictl, helm and etcd for the
# kubelet 1.37 cluster tests (tests/cluster/test_modern.py, on containerd 2.1 and 2.4;
# test_adopt_modern.py, a static-policy node's migration, on 2.1) and the chart tests. The
# kubelet 1.20.2 cluster (tests/cluster/test_cluster.py) is `make cluster-e2e` only: its
# kustomize and restart checks run on the 1.37 cluster (docs/development/cluster-test.md)
test: setup lint kubelet-cri oracle modern
	NRI_E2E_VM=1 NRI_VM_KUBELET_CONTAINERD=2.1,2.4 NRI_CLUSTER_CONTAINERD=2.1,2.4 $(PY) -m pytest tests \
	    --ignore=tests/cluster/test_cluster.py

# the QEMU guest matrix (cgroup v2, every topology of tests/vm/topologies, containerd 2.1 + 1.7),
# then the real kubelet v1.37.2 in the guest on containerd 2.1 and 2.4 (binaries of
# scripts/modern/build.sh, built here when missing: docs/development/qemu-guests.md), judged
# against the kubelet oracle
# (each guest's logs, results.json and console are copied to build/e2e-vm/<topology>:
# E2E_VM_ARGS= for none)
E2E_VM_ARGS ?= --keep build/e2e-vm
e2e-vm: setup oracle
	bash scripts/modern/build.sh kubernetes etcd containerd runc >/dev/null
	nice -n 10 $(PY) scripts/vm/e2e_vm.py $(E2E_VM_ARGS)

demo: setup
	$(PY) scripts/demo.py

bench: setup image-venv
	$(PY) benchmarks/run_all.py

# issue 21: 10 minutes of pod churn per containerd version (1.7 and 2.1 from Debian, 2.4.2 from
# the modern build) with the shipped sharedPoolUpdateMode, auto (cri, cri, async); fails on a CRI
# call outliving 20 s, keeping containerd's goroutine dump
STRESS_ARGS ?= --minutes 10 --version 1.7 --version 2.1 --version 2.4
stress: setup
	bash scripts/modern/build.sh containerd runc >/dev/null
	$(PY) tests/e2e/stress.py $(STRESS_ARGS)

clean:
	VENV=$(VENV) bash scripts/clean.sh

# also the caches outside the checkout that every checkout shares (cluster binaries, guests)
clean-cache:
	VENV=$(VENV) bash scripts/clean.sh --cache
