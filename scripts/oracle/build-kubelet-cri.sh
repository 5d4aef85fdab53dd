#!/usr/bin/env bash
# Build oracle/cmd/kubelet-cri (the kubelet v1.37.2's own CRI requests, see its main.go) with
# the machine's Go and the module proxy, cached outside the checkout; prints the binary's path.
#
# Cache: ${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/oracle/kubelet-cri-<key>, where <key>
# hashes oracle/go.mod, oracle/go.sum, the command's and oracle/internal's sources and
# `go version`: a change to any of them builds anew, nothing else does. Cold (module downloads
# and k8s.io/kubernetes' kubelet packages, empty Go caches): 5 min on an idle 2-core machine,
# 26 min at load 10-15 (both 2026-12-03); warm: a hash.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cache=${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/oracle
command -v go >/dev/null || { echo "build-kubelet-cri: go not found (Go 1.26 needed)" >&2; exit 3; }
key=$( { cat "$here/oracle/go.mod" "$here/oracle/go.sum"; find "$here/oracle/cmd/kubelet-cri" "$here/oracle/internal" \
        -name '*.go' | sort | xargs cat; go version; } | sha256sum | cut -c1-16)
out=$cache/kubelet-cri-$key
if [[ ! -x $out ]]; then
  mkdir -p "$cache"
  tmp=$(mktemp "$cache/.kubelet-cri.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  (cd "$here/oracle" && GOFLAGS=-mod=readonly go build -o "$tmp" ./cmd/kubelet-cri)
  chmod 755 "$tmp"
  mv -f "$tmp" "$out"   # atomic: concurrent builds of the same key are harmless
  trap - EXIT
fi
echo "$out"
