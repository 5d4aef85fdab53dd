# nri-cpumgr image: runs as an external NRI plugin dialing the runtime's socket.
# Minimal for now; deploy/ holds the DaemonSet that mounts /var/run/nri, /sys and the state dir.
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY nri_cpumgr ./nri_cpumgr
RUN pip3 install --no-cache-dir --break-system-packages . && rm -rf /src
WORKDIR /
ENTRYPOINT ["nri-cpumgr", "run"]
CMD ["--config", "/etc/nri-cpumgr/config.yaml"]
