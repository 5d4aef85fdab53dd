#!/usr/bin/env bash
# Fetch containerd (1.7 from trixie, 2.1 from sid), runc and busybox from Debian's
# package archive into a project-local, git-ignored directory ($R, default .runtime/).
# Also extracts the upstream schemas we test against (NRI api.proto 0.6.1 and 0.8,
# CRI api.proto). Nothing is installed system-wide. Idempotent.
#
# Exact versions are pinned (what the tests and README were checked with). To try others:
#   CONTAINERD_17_VERSION=... CONTAINERD_21_VERSION=... RUNC_VERSION=... BUSYBOX_VERSION=...
#   NRI_06_VERSION=... NRI_08_VERSION=... CRI_API_VERSION=...   one Debian version each, or
#   RUNTIME_VERSIONS=newest                                     the newest of each suite
#
#   scripts/fetch-runtime.sh image-tools   instead: buildah and debootstrap (with the libraries
#   the machine lacks) unpacked into $R/image-tools for scripts/build_image.sh
# e.g. `CONTAINERD_21_VERSION=newest make runtime` (see `apt-cache madison containerd`). A pin
# the archive no longer carries fails with the versions it does carry.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
R=${R:-$top/.runtime}
mkdir -p "$R"/apt/{lists/partial,archives/partial,sources.list.d,preferences.d} "$R/debs"
src=/etc/apt/sources.list.d/debian.sources
if [ ! -s "$R/apt/sources.list.d/project.sources" ]; then
  # Reuse the machine's own Debian source; only the suites change.
  awk -v RS= -v ORS='\n\n' 'NR==1' "$src" \
    | sed -E 's/^Suites:.*/Suites: bookworm trixie sid/' > "$R/apt/sources.list.d/project.sources"
fi
APT=(-o Dir::State::Lists="$R/apt/lists" -o Dir::Cache::Archives="$R/apt/archives"
     -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
     -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$R/apt/sources.list.d"
     -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$R/apt/preferences.d"
     -o APT::Sandbox::User=root -o Debug::NoLocking=1)

# pinned Debian versions (package=version), overridable one by one
V_CONTAINERD_17=${CONTAINERD_17_VERSION:-1.7.24~ds1-6+deb13u1}
V_CONTAINERD_21=${CONTAINERD_21_VERSION:-2.1.9+ds1-5}
V_RUNC=${RUNC_VERSION:-1.1.5+ds1-1+deb12u1}
V_BUSYBOX=${BUSYBOX_VERSION:-1:1.35.0-4+deb12u1+b1}
V_NRI_06=${NRI_06_VERSION:-0.6.1-2}
V_NRI_08=${NRI_08_VERSION:-0.8.0-1}
V_CRI_API=${CRI_API_VERSION:-0.32.3-1}
V_BUILDAH=${BUILDAH_VERSION:-1.28.2+ds1-3+deb12u1+b3}

fetch() { # fetch NAME SUITE VERSION DEST-DIR [own]   ("own": DEST holds only this package)
  local name=$1 suite=$2 version=$3 dest=$4 own=${5:-}
  local spec="$name=$version" pin=$version
  if [ "$version" = newest ] || [ "${RUNTIME_VERSIONS:-}" = newest ]; then
    spec="$name/$suite" pin="newest-$suite"
  fi
  local mark="$dest/.pin-$name=${pin//[\/:]/_}"
  if [ -f "$mark" ]; then return 0; fi
  # a tree fetched before versions were pinned (.done-NAME_SUITE): keep it when its changelog
  # names the pinned version (so running daemons of a checkout are not pulled from under them)
  local cl="$dest/usr/share/doc/$name/changelog.Debian.gz"
  [ -f "$cl" ] || cl="$dest/usr/share/doc/${name%-static}/changelog.Debian.gz"
  if [ -f "$dest/.done-${name}_$suite" ] && [ -f "$cl" ] \
     && [ "$(zcat "$cl" | sed -nE '1s/^[^ ]+ \(([^)]*)\).*/\1/p')" = "${version#*:}" ]; then
    touch "$mark"; return 0
  fi
  if [ -n "$own" ] && compgen -G "$dest/.pin-${name}=*" >/dev/null; then
    rm -rf "$dest"  # another version was unpacked here: start clean
  fi
  mkdir -p "$dest"
  if ! (cd "$R/debs" && rm -f ./*.deb && apt-get "${APT[@]}" -qq download "$spec" >/dev/null); then
    echo "fetch-runtime: cannot download $spec; the archive has:" >&2
    apt-cache "${APT[@]}" madison "$name" >&2 || true
    exit 1
  fi
  for f in "$R"/debs/*.deb; do
    echo "fetch-runtime: $(dpkg-deb -f "$f" Package) $(dpkg-deb -f "$f" Version) -> ${dest#"$top"/}"
    dpkg -x "$f" "$dest"
  done
  rm -f "$R"/debs/*.deb
  touch "$mark"
}

if [ ! -f "$R/.updated" ] || [ -n "$(find "$R/.updated" -mmin +1440)" ]; then
  apt-get "${APT[@]}" -qq update
  touch "$R/.updated"
fi
if [ "${1:-}" = image-tools ]; then
  # buildah from bookworm; libgpgme11 and libassuan0 are the libraries it needs that a
  # minimal Debian 12 lacks (the others, libc6, libseccomp2, libdevmapper1.02.1, are there);
  # containers-common for policy.json; debootstrap (shell, needs wget). Nothing is installed.
  T="$R/image-tools"
  fetch buildah bookworm "$V_BUILDAH" "$T"
  fetch libgpgme11 bookworm "${LIBGPGME_VERSION:-1.18.0-3+b1}" "$T"
  fetch libassuan0 bookworm "${LIBASSUAN_VERSION:-2.5.5-5}" "$T"
  fetch golang-github-containers-common bookworm "${CONTAINERS_COMMON_VERSION:-0.50.1+ds1-4}" "$T"
  fetch debootstrap bookworm "${DEBOOTSTRAP_VERSION:-1.0.128+nmu2+deb12u2}" "$T"
  LD_LIBRARY_PATH="$T/usr/lib/x86_64-linux-gnu" "$T/usr/bin/buildah" --version
  exit 0
fi
# containerd 1.7 (NRI v0.6.1) and 2.1 (NRI v0.8.0) in separate roots; shared runc and busybox.
fetch containerd trixie "$V_CONTAINERD_17" "$R/containerd-1.7" own
fetch containerd sid "$V_CONTAINERD_21" "$R/containerd-2.1" own
fetch runc bookworm "$V_RUNC" "$R/root"
fetch busybox-static bookworm "$V_BUSYBOX" "$R/root"
# Upstream schemas (tests compare our proto/ against them; CRI stubs for tests).
fetch golang-github-containerd-nri-dev trixie "$V_NRI_06" "$R/schema/nri-0.6" own
fetch golang-github-containerd-nri-dev sid "$V_NRI_08" "$R/schema/nri-0.8" own
fetch golang-github-kubernetes-cri-api-dev trixie "$V_CRI_API" "$R/schema/cri" own
echo "runtime ready in $R"
"$R/containerd-1.7/usr/bin/containerd" --version
"$R/containerd-2.1/usr/bin/containerd" --version
"$R/root/usr/sbin/runc" --version | head -1
