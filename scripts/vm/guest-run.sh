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
