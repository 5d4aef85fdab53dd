#!/usr/bin/env bash
# Build the nri-cpumgr container image without a Docker engine or an image registry
# (buildah + debootstrap; see README "Deploying" and deploy/README.md), and save it as a
# docker-archive tarball that `ctr images import`, `kind load image-archive` or
# `docker load` take.
#
#   usage: scripts/build_image.sh [TAG]     default TAG nri-cpumgr:dev
#          scripts/build_image.sh --help    this text
#
# Environment:
#   OUT=PATH            the tarball (default .runtime/images/nri-cpumgr.tar)
#   IMAGE_STORE=DIR     buildah's private storage, temp files and logs (default .runtime/image-store)
#   REBUILD_BASE=1      rebuild the local base image even when it exists
#   STORAGE_DRIVER      buildah storage driver (default vfs: works on any filesystem)
#
# Nothing is installed or written outside the checkout's .runtime/ (make clean removes it):
#  1. buildah and debootstrap from Debian's archive unpacked into .runtime/image-tools
#     (scripts/fetch-runtime.sh image-tools; a buildah/debootstrap on PATH is not used);
#  2. once: a local Debian bookworm base image, `debootstrap --variant=minbase bookworm` from
#     the machine's own Debian mirror (the URIs: line of /etc/apt/sources.list.d/debian.sources),
#     committed as localhost/nri-cpumgr-base:bookworm in the private storage and given to the
#     Dockerfile as BASE_IMAGE (no registry is pulled from: --pull-never);
#  3. buildah bud the Dockerfile; 4. buildah push to the tarball. Prints the time and sizes.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  -*) printf 'build_image.sh: unknown option %s\n\n' "$1" >&2; usage >&2; exit 2 ;;
esac
if [ $# -gt 1 ]; then
  printf 'build_image.sh: one TAG at most, got %d arguments\n\n' $# >&2; usage >&2; exit 2
fi
TAG=${1:-nri-cpumgr:dev}
OUT=${OUT:-$top/.runtime/images/nri-cpumgr.tar}
BASE=localhost/nri-cpumgr-base:bookworm
STORE=${IMAGE_STORE:-$top/.runtime/image-store}
TOOLS=$top/.runtime/image-tools
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
t0=$(date +%s)

log() { printf '[build_image] %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  log "needs root (buildah with chroot isolation, debootstrap)"; exit 1
fi

R="$top/.runtime" bash "$top/scripts/fetch-runtime.sh" image-tools >/dev/null
mkdir -p "$STORE"/{root,run,tmp}
export LD_LIBRARY_PATH="$TOOLS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export TMPDIR="$STORE/tmp" CONTAINERS_REGISTRIES_CONF="$STORE/registries.conf"
export CONTAINERS_CONF="$TOOLS/usr/share/containers/containers.conf"
[ -f "$CONTAINERS_REGISTRIES_CONF" ] || printf 'unqualified-search-registries = []\n' \
  > "$CONTAINERS_REGISTRIES_CONF"
# containers/image keeps a blob-info cache in /var/lib/containers/cache whatever --root says:
# each buildah call gets a private mount namespace with $STORE/var-lib-containers bound there
# (the mount point is created when missing and removed again at exit). With the vfs driver
# `buildah mount` is a plain directory, so it outlives that namespace.
mkdir -p "$STORE/var-lib-containers"
made_vlc=
if [ ! -e /var/lib/containers ]; then mkdir /var/lib/containers; made_vlc=1; fi
cleanup_vlc() { if [ -n "$made_vlc" ]; then rmdir /var/lib/containers 2>/dev/null || true; fi; }
trap cleanup_vlc EXIT
buildah() {
  unshare --mount --propagation private sh -c \
    'mount --bind "$0" /var/lib/containers && exec "$@"' "$STORE/var-lib-containers" \
    "$TOOLS/usr/bin/buildah" --root "$STORE/root" --runroot "$STORE/run" \
    --storage-driver "$STORAGE_DRIVER" "$@"
}
debootstrap() { DEBOOTSTRAP_DIR="$TOOLS/usr/share/debootstrap" "$TOOLS/usr/sbin/debootstrap" "$@"; }
POLICY=(--signature-policy "$TOOLS/etc/containers/policy.json")

slim_base() { # ROOTFS: what the official -slim images leave out (docs, man pages, translations)
  local r=$1
  case "$r" in "$STORE"/tmp/nri-cpumgr-rootfs.*) ;; *) log "refusing to slim $r"; exit 1 ;; esac
  [ -x "$r/usr/bin/dpkg" ] || { log "$r is not a debootstrap tree"; exit 1; }
  # dpkg keeps leaving them out for packages installed later (the Dockerfile's apt-get)
  printf 'path-exclude /usr/share/%s/*\n' doc man info locale groff lintian linda \
    > "$r/etc/dpkg/dpkg.cfg.d/nri-cpumgr-slim"
  printf 'path-include /usr/share/doc/*/copyright\n' >> "$r/etc/dpkg/dpkg.cfg.d/nri-cpumgr-slim"
  find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  local d
  for d in man info locale groff lintian linda; do
    if [ -d "$r/usr/share/$d" ]; then find "$r/usr/share/$d" -mindepth 1 -delete; fi
  done
  find "$r/var/lib/apt/lists" "$r/var/cache/apt" "$r/var/log" -mindepth 1 -type f -delete
}

mirror() {
  local src=/etc/apt/sources.list.d/debian.sources
  if [ -r "$src" ]; then
    awk '/^URIs:/ {print $2; exit}' "$src"
  elif [ -r /etc/apt/sources.list ]; then
    awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list
  fi
}

# bump when the base recipe below changes: the cached base is rebuilt when its annotation differs
BASE_RECIPE=2
have=$(buildah inspect --type image \
  --format '{{index .ImageAnnotations "org.nri-cpumgr.base-recipe"}}' "$BASE" 2>/dev/null || true)
if [ -n "${REBUILD_BASE:-}" ] || [ "$have" != "$BASE_RECIPE" ]; then
  m=$(mirror)
  if [ -z "$m" ]; then log "no Debian mirror found in the apt sources"; exit 1; fi
  rootfs=$(mktemp -d "$STORE/tmp/nri-cpumgr-rootfs.XXXXXX")
  trap 'rm -rf "$rootfs"; cleanup_vlc' EXIT
  log "debootstrap --variant=minbase bookworm (base image, built once)"
  debootstrap --variant=minbase bookworm "$rootfs" "$m" >"$STORE/debootstrap.log" 2>&1 \
    || { tail -20 "$STORE/debootstrap.log" >&2; exit 1; }
  slim_base "$rootfs"
  c=$(buildah from "${POLICY[@]}" scratch)
  mnt=$(buildah mount "$c")
  cp -a "$rootfs"/. "$mnt"/
  buildah umount "$c" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd bash --annotation "org.nri-cpumgr.base-recipe=$BASE_RECIPE" "$c"
  buildah commit --quiet --rm "${POLICY[@]}" "$c" "$BASE" >/dev/null
  rm -rf "$rootfs"
  trap cleanup_vlc EXIT
  log "base image $BASE committed ($(( $(date +%s) - t0 )) s)"
fi

t1=$(date +%s)
old=$(buildah images --quiet --noheading "$TAG" 2>/dev/null || true)
log "buildah bud -t $TAG"
# RUN steps in runc from .runtime/root (OCI isolation, host network): buildah's own chroot
# isolation re-executes buildah without LD_LIBRARY_PATH, which the unpacked buildah needs
bud=(--pull-never --isolation oci --runtime "$top/.runtime/root/usr/sbin/runc" --network host
     --layers=false -q -t "$TAG" "${POLICY[@]}"
     --build-arg "BASE_IMAGE=$BASE")
# pip in the build stage trusts what the host trusts (e.g. a proxy's CA): the host's bundle is
# bind-mounted for the RUN steps only; nothing of it ends up in the image
host_ca=/etc/ssl/certs/ca-certificates.crt
if [ -s "$host_ca" ]; then
  bud+=(-v "$host_ca:/etc/ssl/host-ca-bundle.crt:ro"
        --build-arg PIP_CERT=/etc/ssl/host-ca-bundle.crt)
fi
buildah bud "${bud[@]}" "$top" >/dev/null
t2=$(date +%s)
new=$(buildah images --quiet --noheading "$TAG")
if [ -n "$old" ] && [ "$old" != "$new" ]; then
  buildah rmi "$old" >/dev/null 2>&1 || true  # the previous build, now untagged (vfs: full copy)
fi

mkdir -p "$(dirname "$OUT")"
tmp="$OUT.tmp$$"
rm -f "$tmp"
# the archive's RepoTag is the bare TAG; containerd normalizes it to docker.io/library/TAG
buildah push --quiet "${POLICY[@]}" "$TAG" "docker-archive:$tmp:$TAG" >/dev/null
mv -f "$tmp" "$OUT"
t3=$(date +%s)

log "built $TAG in $((t2 - t1)) s (push $((t3 - t2)) s, total $((t3 - t0)) s)"
log "archive $OUT: $(du -h "$OUT" | cut -f1) (uncompressed layers)"
log "image size: $(buildah images --format "{{.Size}}" "$TAG" | head -1)"
echo "$OUT"
