# nri-cpumgr image: the plugin as an external NRI plugin that dials the runtime's socket.
# Built here without a Docker engine by scripts/build_image.sh (buildah); any OCI builder works.
#
# Runs as root: the runtime's NRI socket (/var/run/nri/nri.sock) is created root-owned with mode
# 0600 by containerd and CRI-O, so only uid 0 can connect. Root here carries no capabilities:
# the DaemonSet (deploy/base/daemonset.yaml) drops ALL of them, forbids privilege escalation and
# mounts the root filesystem read-only; the plugin only needs to connect to a unix socket it
# may access as its owner, read /sys and write its state directory, none of which takes a
# capability. It never touches cgroups itself: the runtime applies the adjustments.

# Debian bookworm base; scripts/build_image.sh passes its locally built one (BASE_IMAGE)
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

# --- build stage: the package and its dependencies in a virtualenv (wheels only, no compiler)
FROM ${BASE_IMAGE} AS build
ENV DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# CA bundle pip trusts (build stage only; scripts/build_image.sh points it at the build host's
# bundle when the host reaches the package index through a TLS-intercepting proxy)
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY nri_cpumgr ./nri_cpumgr
# pip >= 25.0 writes the nri-cpumgr command without `import re` (pypa/pip#13166); Debian's
# bundled pip 23.0.1 writes one importing re, enum and functools before the plugin's early
# registration (~4 ms of its start, issue 34)
RUN python3 -m venv /opt/nri-cpumgr \
    && /opt/nri-cpumgr/bin/pip install -q --only-binary=:all: --upgrade 'pip>=25.0' \
    && /opt/nri-cpumgr/bin/pip install --only-binary=:all: '.[nrt]' \
    && /opt/nri-cpumgr/bin/pip uninstall -y -q pip setuptools \
    && find /opt/nri-cpumgr -depth -name '__pycache__' -prune -exec rm -rf {} + \
    && /opt/nri-cpumgr/bin/python -m compileall -q -j 0 /opt/nri-cpumgr/lib

# --- runtime stage: the Python interpreter and the virtualenv only
FROM ${BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/apt /var/log/dpkg.log \
    && mkdir -p /etc/nri-cpumgr /var/lib/nri-cpumgr
COPY --from=build /opt/nri-cpumgr /opt/nri-cpumgr
COPY deploy/examples/config.yaml /etc/nri-cpumgr/config.yaml
# read-only root filesystem: no bytecode writes at run time (compiled at build time above)
ENV PATH=/opt/nri-cpumgr/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
LABEL org.opencontainers.image.title="nri-cpumgr" \
      org.opencontainers.image.description="The kubelet's CPU, Topology and Memory managers as an NRI plugin" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /
# metrics, /healthz and /readyz (metricsAddress in the config; deploy/ uses :9109)
EXPOSE 9109
ENTRYPOINT ["nri-cpumgr", "run"]
CMD ["--config", "/etc/nri-cpumgr/config.yaml"]
