#!/usr/bin/env bash
# `make clean`: remove what this project created, and nothing else.
#  * .venv/ and .runtime/ (containerd, runc, busybox, schemas, image tools, the private image
#    store .runtime/image-store, the image tarball);
#  * cgroups the tests and the demo left under /nri-cpumgr-test (only empty ones can go);
#  * what older versions of scripts/build_image.sh left in the system-wide buildah storage
#    (/var/lib/containers): the images tagged nri-cpumgr:* and the local base image they
#    committed as docker.io/library/debian:bookworm-slim, recognised by the annotation
#    org.nri-cpumgr.base-recipe (a real Debian image has none), and
#    /tmp/nri-cpumgr-debootstrap.log. Packages those versions apt-installed (buildah,
#    debootstrap) are left: they may be used by others; `apt-get remove buildah debootstrap`.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
VENV=${VENV:-.venv}
rm -rf "${top:?}/$VENV" "$top/.runtime"
for h in $(awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts); do
  d="$h/nri-cpumgr-test"
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
done
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
