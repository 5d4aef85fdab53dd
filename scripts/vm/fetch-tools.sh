#!/usr/bin/env bash
# Unpack the guest tools from Debian packages into a private directory (nothing installed
# system-wide): bookworm's qemu-system-x86 7.2 with the libraries a minimal Debian 12 lacks,
# its firmware (seabios, qemu-system-data), and debootstrap. Run with LD_LIBRARY_PATH.
#   scripts/vm/fetch-tools.sh [DEST]     DEST default: $NRI_VM_CACHE/tools
# Reuses the package indexes of scripts/fetch-runtime.sh (.runtime/apt). Idempotent: a stamp
# named after the package list and versions skips the work when nothing changed.
# Why 7.2: trixie's QEMU 10.0 aborts with an Intel vendor plus dies= (encode_topo_cpuid1f).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${NRI_VM_CACHE:-${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/vm}
T=${1:-$CACHE/tools}
R=${R:-$top/.runtime}
[ -d "$R/apt/lists" ] || bash "$top/scripts/fetch-runtime.sh" >/dev/null
APT=(-o Dir::State::Lists="$R/apt/lists" -o Dir::Cache::Archives="$T/.debs"
     -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
     -o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$R/apt/sources.list.d"
     -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$R/apt/preferences.d"
     -o APT::Sandbox::User=root -o Debug::NoLocking=1)
QEMU_V=${QEMU_VERSION:-1:7.2+dfsg-7+deb12u18+b3}
# qemu-system-x86's libraries that a minimal Debian 12 does not carry (found with ldd)
PKGS=(qemu-system-x86/bookworm qemu-system-common/bookworm qemu-system-data/bookworm seabios/bookworm ipxe-qemu/bookworm
      debootstrap/bookworm
      libcapstone4/bookworm libfdt1/bookworm libpmem1/bookworm librdmacm1/bookworm
      libibverbs1/bookworm libslirp0/bookworm libvdeplug2/bookworm liburing2/bookworm
      libfuse3-3/bookworm libaio1/bookworm libndctl6/bookworm libdaxctl1/bookworm
      libnl-3-200/bookworm libnl-route-3-200/bookworm)
EXTRA=${QEMU_EXTRA_LIBS:-}
key=$(printf '%s\n' "$QEMU_V" "${PKGS[@]}" "$EXTRA" | sha256sum | cut -c1-16)
if [ -f "$T/.stamp-$key" ]; then echo "$T"; exit 0; fi
rm -rf "$T"; mkdir -p "$T/.debs/partial"
cd "$T/.debs"
apt-get "${APT[@]}" -qq download "qemu-system-x86=$QEMU_V" "${PKGS[@]:1}" $EXTRA >/dev/null
for f in ./*.deb; do dpkg -x "$f" "$T"; done
rm -rf "$T/.debs"
touch "$T/.stamp-$key"
echo "$T"
