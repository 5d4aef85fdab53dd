#!/usr/bin/env bash
# Build (or reuse) the QEMU guest image for the cgroup v2 end-to-end tests, from Debian
# packages only: debootstrap --variant=minbase trixie with systemd, the Debian kernel and a
# small initramfs, runc, python3, numactl; a venv with tests/vm/guest-requirements.txt from a
# cp313 wheelhouse; containerd 1.7 and 2.1, runc, busybox and the CRI schema from .runtime/
# (scripts/fetch-runtime.sh) copied to /opt/nri-cpumgr/runtime. Output, in the cache directory
# (outside the checkout): $NRI_VM_CACHE/guest-<key>/{disk.img,vmlinuz,initrd.img}, where <key>
# hashes every input (this script, the requirements, the runtime pins). Prints that directory.
# Nothing is installed on the host; the build runs in a private mount namespace (unshare -m),
# so no mount outlives it. A reused image's .done is touched; after a successful build, the
# other guest-* directories unused for a day are removed (checkouts of different versions
# working side by side keep their images instead of rebuilding in turn).
#   NRI_VM_CACHE   cache root (default /var/cache/nri-cpumgr/vm)
#   NRI_VM_MIRROR  Debian mirror (default: the one in .runtime/apt, deb.debian.org)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${NRI_VM_CACHE:-${NRI_CPUMGR_CACHE:-/var/cache/nri-cpumgr}/vm}
R=${R:-$top/.runtime}
SUITE=trixie
MIRROR=${NRI_VM_MIRROR:-http://deb.debian.org/debian}
PKGS=systemd,systemd-sysv,udev,linux-image-amd64,initramfs-tools,zstd,kmod,python3,python3-venv,numactl,runc,procps
REQ=$top/tests/vm/guest-requirements.txt
[ -f "$R/containerd-2.1/usr/bin/containerd" ] || bash "$top/scripts/fetch-runtime.sh" >/dev/null
T=$(bash "$top/scripts/vm/fetch-tools.sh")
pins=$(cd "$R" && ls -a containerd-1.7 containerd-2.1 root | grep '^\.pin-' | sort)
key=$( { cat "$0" "$REQ"; echo "$SUITE $MIRROR $PKGS"; echo "$pins"; } | sha256sum | cut -c1-16)
OUT=$CACHE/guest-$key
if [ -f "$OUT/.done" ]; then touch "$OUT/.done" 2>/dev/null || true; echo "$OUT"; exit 0; fi
mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9
if [ -f "$OUT/.done" ]; then echo "$OUT"; exit 0; fi
W=$CACHE/build-$key
rm -rf "$W"; mkdir -p "$W/wheelhouse"
log=$W/build.log
echo "build-guest: building $OUT (log: $log)" >&2
t0=$(date +%s)
# 1. the wheelhouse for the guest's Python (host pip, binary wheels only)
py=python3; [ -x "$top/.venv/bin/python" ] && py=$top/.venv/bin/python
"$py" -m pip download -q --python-version 3.13 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --implementation cp \
  --only-binary=:all: -d "$W/wheelhouse" -r "$REQ" >>"$log" 2>&1
echo "build-guest: wheelhouse $(($(date +%s)-t0)) s" >&2
# 2. the root file system, in a private mount namespace
export W T R top MIRROR SUITE PKGS
unshare -m --propagation private bash -euo pipefail -c '
  root=$W/rootfs
  DEBOOTSTRAP_DIR=$T/usr/share/debootstrap "$T/usr/sbin/debootstrap" --variant=minbase \
    --include="$PKGS" --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$SUITE" "$root" "$MIRROR" >>"$W/build.log" 2>&1 \
    || { tail -30 "$W/build.log" "$root/debootstrap/debootstrap.log" >&2; exit 1; }
  echo "build-guest: debootstrap done" >&2
  mount -t proc proc "$root/proc"; mount --rbind /dev "$root/dev"; mount -t sysfs sys "$root/sys"
  # a small initramfs: only what mounting /dev/vda needs (the rest comes from the root fs)
  printf "MODULES=list\nCOMPRESS=zstd\n" > "$root/etc/initramfs-tools/conf.d/nri-vm.conf"
  printf "virtio_pci\nvirtio_blk\next4\n" >> "$root/etc/initramfs-tools/modules"
  chroot "$root" update-initramfs -u -k all >>"$W/build.log" 2>&1
  # the venv
  mkdir -p "$root/tmp/wheelhouse" && cp "$W"/wheelhouse/*.whl "$root/tmp/wheelhouse/"
  cp "'"$REQ"'" "$root/tmp/req.txt"
  chroot "$root" python3 -m venv /opt/venv >>"$W/build.log" 2>&1
  chroot "$root" /opt/venv/bin/pip install -q --no-index --find-links /tmp/wheelhouse \
    -r /tmp/req.txt >>"$W/build.log" 2>&1
  rm -rf "$root/tmp/wheelhouse" "$root/tmp/req.txt"
  # the runtime of scripts/fetch-runtime.sh (containerd 1.7 + 2.1, runc, busybox, CRI schema)
  D=$root/opt/nri-cpumgr/runtime; mkdir -p "$D"
  for d in containerd-1.7 containerd-2.1 root images schema; do  # images: made by the harness
    if [ -e "$R/$d" ]; then cp -a "$R/$d" "$D/"; fi
  done
  # boot straight into the job: 9p share at /mnt/job, unit runs /mnt/job/run, then power off.
  # modprobe first: while udev coldplug is loading 9pnet_virtio, its "virtio" transport is
  # registered before its devices are bound (net/9p/trans_virtio.c p9_virtio_init), so a
  # mount then finds no channel "job" (ENOENT); modprobe waits for a load under way to end.
  mkdir -p "$root/mnt/job"
  cat > "$root/etc/systemd/system/nri-vm-job.service" <<UNIT
[Unit]
Description=nri-cpumgr guest job (from the 9p share "job")
After=local-fs.target
SuccessAction=poweroff-force
FailureAction=poweroff-force
[Service]
Type=oneshot
ExecStart=/bin/sh -c "modprobe -a 9pnet_virtio 9p && for i in 1 2 3 4 5; do mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job /mnt/job && exec /bin/sh /mnt/job/run; echo nri-vm-job: mounting the job share failed, trying again; sleep 1; done; exit 1"
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
UNIT
  chroot "$root" systemctl enable nri-vm-job.service >>"$W/build.log" 2>&1
  chroot "$root" systemctl set-default multi-user.target >>"$W/build.log" 2>&1
  for u in getty@tty1.service serial-getty@ttyS0.service getty.target apt-daily.timer \
      apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
      systemd-timesyncd.service systemd-networkd.service systemd-resolved.service \
      systemd-journal-flush.service systemd-update-utmp.service logrotate.timer \
      man-db.timer systemd-tmpfiles-clean.timer modprobe@drm.service \
      systemd-user-sessions.service; do
    ln -sf /dev/null "$root/etc/systemd/system/$u"
  done
  echo nri-vm > "$root/etc/hostname"
  printf "127.0.0.1 localhost nri-vm\n" > "$root/etc/hosts"
  : > "$root/etc/fstab"
  chroot "$root" passwd -d root >/dev/null
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/*
  umount -R "$root/dev" "$root/proc" "$root/sys"
'
echo "build-guest: rootfs $(($(date +%s)-t0)) s" >&2
# 3. kernel, initramfs and the ext4 image made from the tree (no loop mount)
mkdir -p "$W/out"
cp "$W"/rootfs/boot/vmlinuz-* "$W/out/vmlinuz"
cp "$W"/rootfs/boot/initrd.img-* "$W/out/initrd.img"
size=$(( $(du -sm "$W/rootfs" | cut -f1) + 1536 ))
mkfs.ext4 -q -F -L root -d "$W/rootfs" "$W/out/disk.img" "${size}M" >>"$log" 2>&1
cp "$log" "$W/out/build.log"
rm -rf "$OUT"; mv "$W/out" "$OUT"; rm -rf "$W"
echo "build-guest: done in $(($(date +%s)-t0)) s" | tee -a "$OUT/build.log" >&2
touch "$OUT/.done"
for old in "$CACHE"/guest-*; do  # under the build lock: no other build is moving one in
  [ "$old" = "$OUT" ] || [ -n "$(find "$old/.done" -mmin -1440 2>/dev/null)" ] || rm -rf "$old"
done
echo "$OUT"
