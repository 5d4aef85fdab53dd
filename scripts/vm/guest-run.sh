#!/bin/sh
# Runs INSIDE the QEMU guest, started by the image's nri-vm-job.service from the 9p share
# mounted at /mnt/job (the host's job directory, see tests/vm/runner.py). Installs the
# project's wheel into the image's venv, runs the scenarios of job.json with the e2e harness
# from the shipped tests/ tree, writes results.json + logs back to the share. The unit powers
# the guest off when this returns.
J=/mnt/job
exec >"$J/guest.log" 2>&1
echo "guest: job starts at uptime $(cut -d' ' -f1 /proc/uptime) s"
systemd-analyze blame 2>&1 | head -6; systemd-analyze critical-chain nri-vm-job.service 2>&1 | head -12
set -x
# The scheduler's CFS-bandwidth static key (__cfs_bandwidth_used) is switched on when the
# first cgroup gets a CPU quota (cpu.max) and off when the last loses it: the kernel then
# patches its own text with an int3 (text_poke_bp), which multi-threaded TCG does not always
# see on every vCPU at once; a vCPU ran the stale int3 after the patch was done ("Oops: int3"
# at set_next_task_fair+0x37, account_cfs_rq_runtime's static branch just patched to a jmp;
# 2s-2die-l3 lost both its boots of one `make e2e-vm` to int3 oopses, 2026-12-06). Every
# container with a CPU limit can flip it, so a quota on an empty cgroup of our own keeps it
# on for the whole boot: patched once here, before any test, then never again.
echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
mkdir -p /sys/fs/cgroup/nri-vm-cfs-bw && echo "1000000 100000" > /sys/fs/cgroup/nri-vm-cfs-bw/cpu.max
cat /sys/fs/cgroup/nri-vm-cfs-bw/cpu.max
# more read-only 9p shares ("tag mountpoint" per line: the modern build's binaries)
if [ -f "$J/shares" ]; then
  while read -r tag dir; do
    mkdir -p "$dir" && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro "$tag" "$dir"
  done < "$J/shares"
fi
# copies on the guest's own disk of what the job runs often from those shares ("local": one
# guest path per line, a file or a directory, bind-mounted over itself): 9p is mounted
# without a cache, so every exec from a share reads the binary over 9p again (runc for each
# container operation, the shim for each pod), under TCG many times slower than the image's
# ext4 where containerd 1.7/2.1 and their runc live
if [ -f "$J/local" ]; then
  while read -r p; do
    l=/opt/local$p
    mkdir -p "$(dirname "$l")" && cp -Rp "$p" "$l" && mount --bind "$l" "$p"
  done < "$J/local"
fi
# QEMU's user-mode network ("address gateway"): the host's API server at the gateway
if [ -f "$J/net" ]; then
  read -r addr gw < "$J/net"
  B=/opt/nri-cpumgr/runtime/root/bin/busybox
  modprobe virtio_net
  for _ in $(seq 60); do dev=$(ls /sys/class/net | grep -v '^lo$' | head -1); [ -n "$dev" ] && break; sleep 0.5; done
  $B ip link set lo up; $B ip addr add "$addr" dev "$dev"; $B ip link set "$dev" up
  $B ip route add default via "$gw"
fi
mkdir -p /opt/work && cp -a "$J/tests" "$J/scripts" /opt/work/
/opt/venv/bin/pip install -q --no-deps --no-index "$J"/nri_cpumgr-*.whl
cd /opt/work
set +x
export NRI_CPUMGR_RUNTIME=/opt/nri-cpumgr/runtime NRI_E2E_ALLOW_LIVE_NODE=1
/opt/venv/bin/python -m tests.vm.guest_scenarios --job "$J/job.json" --out "$J/results.json"
rc=$?
echo "guest: scenarios exit $rc at uptime $(cut -d' ' -f1 /proc/uptime) s"
echo "$rc" > "$J/exit-code"
sync
