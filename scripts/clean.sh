#!/usr/bin/env bash
# `make clean`: remove what this project created, and nothing else.
#  * .venv/ and .runtime/ (containerd, runc, busybox, schemas, image tools, the private image
#    store .runtime/image-store, the image tarballs .runtime/images); when .runtime is a
#    symlink (a shared runtime), only the link goes, never what it points to;
#  * caches and build output in the checkout: .pytest_cache, .ruff_cache, .hypothesis,
#    every __pycache__, *.egg-info, build/, dist/, the generated tests/e2e/_cri/;
#  * cgroups the tests and the demo left under /nri-cpumgr-test (only empty ones, and only
#    those of runs that have ended: a run-<pid> whose process still lives is left alone);
#  * what older versions of scripts/build_image.sh left in the system-wide buildah storage
#    (/var/lib/containers): the images tagged nri-cpumgr:* and the local base image they
#    committed as docker.io/library/debian:bookworm-slim, recognised by the annotation
#    org.nri-cpumgr.base-recipe (a real Debian image has none), and
#    /tmp/nri-cpumgr-debootstrap.log. Packages those versions apt-installed (buildah,
#    debootstrap) are left: they may be used by others; `apt-get remove buildah debootstrap`.
#  * with --cache (`make clean-cache`) only: the caches outside the checkout,
#    ${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}: the test cluster's Kubernetes binaries
#    (scripts/cluster/build.sh) and the QEMU guest images. Every checkout on the machine
#    shares them, so a plain `make clean` leaves them (and says so);
# Not touched: pytest's /tmp/pytest-of-<user> (shared by every pytest on the machine; this
# project keeps only failed tests' directories there, see pyproject.toml).
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-.venv}
rm -rf "${top:?}/$VENV"
if [ -L "$top/.runtime" ]; then
  echo "removed the symlink .runtime (its target $(readlink "$top/.runtime") is left)"
  rm -f "$top/.runtime"
else
  rm -rf "$top/.runtime"
fi
rm -rf "$top"/{.pytest_cache,.ruff_cache,.hypothesis,build,dist,tests/e2e/_cri} "$top"/*.egg-info
# find does not follow symlinks (-P): nothing outside the checkout is visited
find "$top" -path "$top/.git" -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
for h in $(awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts); do
  d="$h/nri-cpumgr-test"
  [ -d "$d" ] || continue
  for r in "$d"/*; do
    [ -d "$r" ] || continue
    case "${r##*/}" in
      run-*) [ -d "/proc/${r##*/run-}" ] && continue ;;  # that run is still going
    esac
    find "$r" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  rmdir "$d" 2>/dev/null
done
cache=${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}
if [ -d "$cache" ]; then
  if [ "${1:-}" = --cache ]; then
    echo "removed $cache ($(du -sh "$cache" 2>/dev/null | cut -f1))"
    rm -rf "${cache:?}"
  else
    echo "kept $cache ($(du -sh "$cache" 2>/dev/null | cut -f1), shared by every checkout:" \
         "make clean-cache removes it)"
  fi
fi
rm -f /tmp/nri-cpumgr-debootstrap.log
if command -v buildah >/dev/null && [ -d /var/lib/containers/storage ]; then
  base=docker.io/library/debian:bookworm-slim
  if [ -n "$(buildah inspect --type image \
      --format '{{index .ImageAnnotations "org.nri-cpumgr.base-recipe"}}' "$base" 2>/dev/null)" ]
  then
    buildah rmi "$base" >/dev/null 2>&1 && echo "removed the old local base image $base"
  fi
  for img in $(buildah images --noheading --format '{{.Name}}:{{.Tag}}' 2>/dev/null \
               | grep -E '(^|/)nri-cpumgr:' || true); do
    buildah rmi "$img" >/dev/null 2>&1 && echo "removed $img"
  done
fi
exit 0
