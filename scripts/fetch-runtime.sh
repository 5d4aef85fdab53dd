#!/usr/bin/env bash
# Fetch containerd (1.7 from trixie, 2.1 from sid), runc and busybox from Debian's
# package archive into a project-local, git-ignored directory ($R, default .runtime/).
# Also extracts the upstream schemas we test against (NRI api.proto 0.6.1 and 0.8,
# CRI api.proto). Nothing is installed system-wide. Idempotent.
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

fetch() { # fetch NAME/SUITE DEST-DIR
  local spec=$1 dest=$2
  if [ -f "$dest/.done-${spec//\//_}" ]; then return 0; fi
  mkdir -p "$dest"
  (cd "$R/debs" && rm -f ./*.deb && apt-get "${APT[@]}" -qq download "$spec" >/dev/null)
  for f in "$R"/debs/*.deb; do dpkg -x "$f" "$dest"; done
  rm -f "$R"/debs/*.deb
  touch "$dest/.done-${spec//\//_}"
}

if [ ! -f "$R/.updated" ] || [ -n "$(find "$R/.updated" -mmin +1440)" ]; then
  apt-get "${APT[@]}" -qq update
  touch "$R/.updated"
fi
# containerd 1.7 (NRI v0.6.1) and 2.1 (NRI v0.8.0) in separate roots; shared runc and busybox.
fetch containerd/trixie "$R/containerd-1.7"
fetch containerd/sid "$R/containerd-2.1"
fetch runc/bookworm "$R/root"
fetch busybox-static/bookworm "$R/root"
# Upstream schemas (tests compare our proto/ against them; CRI stubs for tests).
fetch golang-github-containerd-nri-dev/trixie "$R/schema/nri-0.6"
fetch golang-github-containerd-nri-dev/sid "$R/schema/nri-0.8"
fetch golang-github-kubernetes-cri-api-dev/trixie "$R/schema/cri"
echo "runtime ready in $R"
"$R/containerd-1.7/usr/bin/containerd" --version
"$R/containerd-2.1/usr/bin/containerd" --version
"$R/root/usr/sbin/runc" --version | head -1
