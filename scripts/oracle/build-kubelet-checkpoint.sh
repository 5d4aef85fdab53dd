#!/usr/bin/env bash
# Build oracle/cmd/kubelet-checkpoint (the kubelet's own CPU and Memory Manager checkpoint
# writers, see its main.go) with the machine's Go and the module proxy, cached outside the
# checkout; prints the binary's path. The adoption tests (tests/unit/test_adopt_kubelet_go.py)
# run it to write the checkpoints they read back.
#
# Cache: ${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/oracle/kubelet-checkpoint-<key>, where
# <key> hashes oracle/go.mod, oracle/go.sum, the command's and oracle/internal's sources and
# `go version`: a change to any of them builds anew, nothing else does. After `make oracle`
# (same packages, warm Go build cache): seconds; cold, it compiles the kubelet's state
# packages and their dependencies only.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/oracle
command -v go >/dev/null || { echo "build-kubelet-checkpoint: go not found (Go 1.26 needed)" >&2; exit 3; }
key=$( { cat "$here/oracle/go.mod" "$here/oracle/go.sum"; find "$here/oracle/cmd/kubelet-checkpoint" \
        "$here/oracle/internal" -name '*.go' | sort | xargs cat; go version; } | sha256sum | cut -c1-16)
out=$cache/kubelet-checkpoint-$key
if [[ ! -x $out ]]; then
  mkdir -p "$cache"
  tmp=$(mktemp "$cache/.kubelet-checkpoint.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "$here/oracle/go.mod")
  (cd "$here/oracle" && GOFLAGS=-mod=readonly go build -ldflags "-X main.version=$version" \
     -o "$tmp" ./cmd/kubelet-checkpoint) >&2
  chmod 755 "$tmp"
  mv -f "$tmp" "$out"   # atomic: concurrent builds of the same key are harmless
  trap - EXIT
fi
echo "$out"
