#!/usr/bin/env bash
# Build the test cluster's Kubernetes binaries from Debian's packages, once, into a cache outside
# the checkout; later runs reuse it while its inputs are unchanged.
#
#   scripts/cluster/build.sh            build (or reuse) and print the bin directory
#   scripts/cluster/build.sh --print    print the bin directory, build nothing (exit 1 if absent)
#
# What it uses (nothing is installed system-wide; see ../shared/docs/real-kubelet.md):
#   * Kubernetes v1.20.2: Debian bookworm's `kubernetes` source package (the newest whose whole
#     tree, vendor/ included, a registry here ships), unpacked from its orig tarball;
#   * Go: trixie's golang-1.24-go + golang-1.24-src, unpacked with dpkg -x;
#   * the vendored github.com/modern-go/reflect2 1.0.1 and json-iterator/go 1.1.10 replaced by
#     Debian's 1.0.2 and 1.1.12 (golang-github-*-dev): with Go 1.18 and newer, 1.0.1's map
#     iterator crashes the API server ("fatal error: fault" encoding an unstructured object,
#     e.g. a custom resource); 1.0.2 is the upstream fix, API-compatible;
#   * etcd: trixie's etcd-server; kubectl 1.32 (with kustomize 5 built in, for
#     `kubectl apply -k deploy/`): trixie's kubectl; both unpacked with dpkg -x.
# Built: kubelet, kube-apiserver, kube-controller-manager, kube-scheduler (static, CGO off,
# GOPATH mode as 1.20 needs), after generating the OpenAPI definitions kube-apiserver needs.
# Cost (2 cores): about 12-15 minutes cold (4 GB of disk while building, 470 MB kept);
# nothing on a warm cache.
#
# Cache: ${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/cluster/<key>, where <key> hashes the
# pinned versions below and BUILD_REVISION (raise it when a change here alters the binaries);
# Go's build cache, while building, in .../cluster/gocache.
# Override a version with K8S_SRC_VERSION=..., GO_PKG_VERSION=..., ETCD_VERSION=...,
# KUBECTL_VERSION=... (Debian versions).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/cluster
V_K8S=${K8S_SRC_VERSION:-1.20.5+really1.20.2-1.1+deb12u1}
V_GO=${GO_PKG_VERSION:-1.24.4-1}
V_ETCD=${ETCD_VERSION:-3.5.16-4}
V_KUBECTL=${KUBECTL_VERSION:-1.32.3+ds-2}
K8S_GIT_VERSION=v1.20.2
V_REFLECT2=${REFLECT2_VERSION:-1.0.2-2}
V_JSONITER=${JSONITER_VERSION:-1.1.12-1}
BUILD_REVISION=2

key=$(echo "$V_K8S $V_GO $V_ETCD $V_KUBECTL $V_REFLECT2 $V_JSONITER $BUILD_REVISION" \
      | sha256sum | cut -c1-16)
OUT=$CACHE/$key
BIN=$OUT/bin
if [ "${1:-}" = --print ]; then
  [ -x "$BIN/kubelet" ] && [ -f "$OUT/.complete" ] && { echo "$BIN"; exit 0; }
  echo "cluster binaries not built: run scripts/cluster/build.sh" >&2; exit 1
fi
if [ -f "$OUT/.complete" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9  # one build at a time (two checkouts' make test share the cache)
if [ -f "$OUT/.complete" ]; then echo "$BIN"; exit 0; fi  # built while we waited

log() { echo "cluster-build: $*" >&2; }
mkdir -p "$OUT"/{apt/lists/partial,apt/archives/partial,apt/sources.list.d,debs,src,go,bin}
cat > "$OUT/apt/sources.list.d/project.sources" <<EOF
Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
APT=(-o Dir::State::Lists="$OUT/apt/lists" -o Dir::Cache::Archives="$OUT/apt/archives"
     -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
     -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$OUT/apt/sources.list.d"
     -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
     -o APT::Sandbox::User=root -o Debug::NoLocking=1)
if [ ! -f "$OUT/apt/.updated" ]; then
  log "package indexes (bookworm, trixie; deb + deb-src)"
  apt-get "${APT[@]}" -qq update
  touch "$OUT/apt/.updated"
fi

unpack() { # unpack NAME=VERSION... into $OUT/$dest (once)
  local dest=$1; shift
  [ -f "$OUT/$dest/.done" ] && return 0
  mkdir -p "$OUT/$dest"
  (cd "$OUT/debs" && rm -f ./*.deb && apt-get "${APT[@]}" -qq download "$@" >/dev/null)
  for f in "$OUT"/debs/*.deb; do
    log "$(dpkg-deb -f "$f" Package) $(dpkg-deb -f "$f" Version) -> $dest"
    dpkg -x "$f" "$OUT/$dest"
  done
  rm -f "$OUT"/debs/*.deb
  touch "$OUT/$dest/.done"
}
unpack go "golang-1.24-go=$V_GO" "golang-1.24-src=$V_GO"
unpack etcd "etcd-server=$V_ETCD"
unpack kubectl "kubectl=$V_KUBECTL"
unpack godeps "golang-github-modern-go-reflect2-dev=$V_REFLECT2" \
              "golang-github-json-iterator-go-dev=$V_JSONITER"

# Kubernetes source: the orig tarball of the bookworm source package, as a GOPATH tree
GOPATH=$OUT/gopath
KSRC=$GOPATH/src/k8s.io/kubernetes
if [ ! -f "$KSRC/.done" ]; then
  log "kubernetes $V_K8S source (bookworm)"
  (cd "$OUT/src" && apt-get "${APT[@]}" -qq source --download-only "kubernetes=$V_K8S" >/dev/null)
  orig=$(ls "$OUT"/src/kubernetes_*.orig.tar.* | head -n1)
  rm -rf "$KSRC" && mkdir -p "$KSRC"
  tar -xf "$orig" -C "$KSRC" --strip-components=1
  for dep in github.com/modern-go/reflect2 github.com/json-iterator/go; do
    rm -rf "$KSRC/vendor/$dep"
    cp -r "$OUT/godeps/usr/share/gocode/src/$dep" "$KSRC/vendor/$dep"
  done
  touch "$KSRC/.done"
fi

GOROOT=$(ls -d "$OUT"/go/usr/lib/go-1.24)
export GOROOT GOPATH PATH="$GOROOT/bin:$PATH"
export GO111MODULE=off GOTOOLCHAIN=local GOPROXY=off CGO_ENABLED=0 GOFLAGS=
export GOCACHE=$CACHE/gocache
cd "$KSRC"

vpkg=k8s.io/kubernetes/vendor/k8s.io/component-base/version
cpkg=k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version
LDFLAGS="-s -w"
for p in $vpkg $cpkg; do
  LDFLAGS+=" -X $p.gitVersion=$K8S_GIT_VERSION -X $p.gitMajor=1 -X $p.gitMinor=20"
  LDFLAGS+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

# kube-apiserver needs the generated OpenAPI definitions (the tarball does not carry them)
openapi=pkg/generated/openapi/zz_generated.openapi.go
if [ ! -s "$openapi" ]; then
  log "openapi-gen"
  go build -o "$OUT/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
  # every package with a +k8s:openapi-gen= tag in a (non-test) Go file, as the release build's
  # Makefile.generated_files selects them; vendor/k8s.io/* are links to staging/src/k8s.io/*
  pkgs=$(grep -rl --include='*.go' --exclude='*_test.go' '+k8s:openapi-gen=' \
             staging/src/k8s.io pkg vendor 2>/dev/null \
           | xargs -n1 dirname | sort -u \
           | sed -e 's|^staging/src/|k8s.io/kubernetes/vendor/|' -e 's|^pkg/|k8s.io/kubernetes/pkg/|' \
                 -e 's|^vendor/|k8s.io/kubernetes/vendor/|' | sort -u | paste -sd, -)
  "$OUT/openapi-gen" --input-dirs "$pkgs" \
    --output-package k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi -o "$GOPATH/src" \
    -h hack/boilerplate/boilerplate.generatego.txt \
    --report-filename "$OUT/openapi-violations.list" >&2
  if ! diff -q <(sort "$OUT/openapi-violations.list") \
               <(sort api/api-rules/violation_exceptions.list) >/dev/null; then
    log "warning: OpenAPI rule violations differ from api/api-rules/violation_exceptions.list"
  fi
fi

for cmd in kubelet kube-apiserver kube-controller-manager kube-scheduler; do
  [ -x "$BIN/$cmd" ] && continue
  log "go build $cmd"
  go build -tags selinux,notest -ldflags "$LDFLAGS" -o "$BIN/$cmd.tmp" "./cmd/$cmd"
  mv "$BIN/$cmd.tmp" "$BIN/$cmd"
done
ln -sf "$OUT/etcd/usr/bin/etcd" "$BIN/etcd"
ln -sf "$OUT/kubectl/usr/bin/kubectl" "$BIN/kubectl"
"$BIN/kubelet" --version >&2
# keep what runs (bin/, etcd/, kubectl/: about 470 MB); the toolchain, sources and Go's build
# cache (3 GB) are only needed to build, which happens again only when the inputs change
rm -rf "$OUT"/{go,gopath,src,debs,apt,godeps,openapi-gen} "$CACHE/gocache"
touch "$OUT/.complete"
echo "$BIN"
