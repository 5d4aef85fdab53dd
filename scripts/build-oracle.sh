#!/usr/bin/env bash
# Build the kubelet oracle (oracle/cmd/kubelet-oracle) against the kubelet release named in
# oracle/KUBERNETES_VERSION (or $KUBERNETES_VERSION), outside the checkout:
#   ${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/oracle/<version>/kubelet-oracle
# Rebuilt only when the oracle's sources or the version change (a stamp next to the binary).
# Another release: KUBERNETES_VERSION=v1.37.3 make oracle  (the module is copied next to the
# binary and re-pinned there: k8s.io/kubernetes <version>, every k8s.io/* staging module of
# that release at v0.<minor>.<patch>; the checkout's go.mod is not touched).
# --print-path: build if needed, print the binary's path (nothing else on stdout).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
version=${KUBERNETES_VERSION:-$(tr -d ' \n' < oracle/KUBERNETES_VERSION)}
cache=${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}
out=$cache/oracle/$version
bin=$out/kubelet-oracle
print=${1:-}
log() { if [[ $print == --print-path ]]; then echo "$@" >&2; else echo "$@"; fi; }

command -v go >/dev/null || { echo "build-oracle: go is not installed (Go 1.26 needed)" >&2; exit 1; }
stamp=$( { echo "$version"; go version; cat scripts/build-oracle.sh oracle/go.mod oracle/go.sum;
           find oracle -name '*.go' -print0 | sort -z | xargs -0 cat; } | sha256sum | cut -d' ' -f1)
if [[ -x $bin && -f $out/stamp && $(cat "$out/stamp") == "$stamp" ]]; then
  [[ $print == --print-path ]] && echo "$bin"
  exit 0
fi
mkdir -p "$out"
pinned=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}
             $1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' oracle/go.mod)
src=$root/oracle
if [[ $version != "$pinned" ]]; then
  # another release: a copy of the module, re-pinned
  src=$out/src
  rm -rf "$src"; mkdir -p "$src"
  cp -r oracle/. "$src/"
  staging=v0.${version#v1.}
  ( cd "$src"
    go mod download "k8s.io/kubernetes@$version" >&2
    kmod=$(go env GOMODCACHE)/k8s.io/kubernetes@$version/go.mod
    args=(-require "k8s.io/kubernetes@$version" -dropreplace k8s.io/api)
    for m in $(sed -n 's/^\s*\(k8s\.io\/[^ ]*\) => \.\/staging.*/\1/p' "$kmod"); do
      args+=(-replace "$m=$m@$staging")
    done
    go mod edit "${args[@]}"
    go mod tidy >&2 )
fi
log "build-oracle: building kubelet-oracle against k8s.io/kubernetes $version (first build: minutes)"
t0=$(date +%s)
( cd "$src" && go build -ldflags "-X main.version=$version" -o "$bin.tmp" ./cmd/kubelet-oracle ) >&2
mv "$bin.tmp" "$bin"
echo "$stamp" > "$out/stamp"
log "build-oracle: $bin ($(( $(date +%s) - t0 )) s)"
[[ $print == --print-path ]] && echo "$bin"
exit 0
