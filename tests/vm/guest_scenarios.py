"""Inside the QEMU guest: run the scenarios on a real containerd and record what was seen.

Run by the guest's job unit (``scripts/vm/guest-run.sh``) as
``python -m tests.vm.guest_scenarios --job job.json --out results.json``; never on the host
(it refuses to run without the guest image's job unit).
For each containerd version and cgroup driver in the job it starts the e2e harness's
:class:`~tests.e2e.harness.Containerd` (systemd driver: runc's ``SystemdCgroup``), then per
scenario an nri-cpumgr with that scenario's configuration, drives pods through the
kubelet-like :class:`~tests.e2e.harness.CRIClient`, and records for every container the cpus
and mems of the OCI spec, of the cgroup v2 ``cpuset.*.effective`` files and of
``/proc/<pid>/status``, the errors of refused containers and, for the memory scenario,
``/proc/<pid>/numa_maps`` pages per node. Judging is left to :mod:`tests.vm.checks` on the
host. Results are rewritten after every scenario, so a guest that times out still reports
what it finished.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from tests.e2e.harness import Containerd, CRIClient, PluginProcess
from tests.e2e.harness import cgroups as cg
from tests.e2e.plugin_run import start_plugin

GUEST_MARK = Path("/etc/systemd/system/nri-vm-job.service")  # made by build-guest.sh
MEM = "200Mi"
SETTLE = 60.0  # seconds to wait for the shared pool to follow (TCG guests are slow)
# a container that keeps ALLOC_MB of anonymous memory (a shell variable) and sleeps
ALLOC_MB = 16
ALLOC_CMD = ("/bin/sh", "-c",
             f"x=$(head -c {ALLOC_MB * 1000000} /dev/zero | tr '\\000' a); "
             "touch /tmp/allocated; while true; do sleep 3600; done")  # sh keeps x

# The docs' example pods (Kubernetes "Control CPU Management Policies on the Node")
SHARED_PODS: dict[str, tuple[str, dict[str, str], dict[str, str]]] = {
    "besteffort": ("BestEffort", {}, {}),
    "burstable-mem": ("Burstable", {"memory": "100Mi"}, {"memory": MEM}),
    "burstable-cpu": ("Burstable", {"cpu": "500m"}, {"cpu": "1"}),
    "guaranteed-frac": ("Guaranteed", {"cpu": "1500m", "memory": MEM},
                        {"cpu": "1500m", "memory": MEM}),
}


def g(cpu: int, mem: str = MEM) -> tuple[str, dict[str, str], dict[str, str]]:
    r = {"cpu": str(cpu), "memory": mem}
    return ("Guaranteed", r, r)


class Run:
    """One scenario's pods on one containerd: creates them and records what shows."""

    def __init__(self, cri: CRIClient, ctrd: Containerd) -> None:
        self.cri = cri
        self.ctrd = ctrd
        self.plugin: PluginProcess | None = None
        self.ids: dict[str, str] = {}  # container name -> id
        self.pods: dict[str, str] = {}  # container name -> pod id
        self.spec: dict[str, dict[str, Any]] = {}
        self.refused: dict[str, str] = {}
        self.steps: list[dict[str, Any]] = []

    def make(self, name: str, qos: str, req: dict[str, str], lim: dict[str, str],
             command: tuple[str, ...] = ("/bin/sleep", "inf")) -> str | None:
        pod = self.cri.run_pod(name, qos)
        self.pods[name] = pod
        self.spec[name] = {"qos": qos, "requests": req, "limits": lim}
        try:
            cid = self.cri.create_container(pod, "app", requests=req, limits=lim,
                                            command=list(command))
        except grpc.RpcError as e:
            self.refused[name] = f"{e.code().name}: {e.details()}"
            return None
        self.cri.start_container(cid)
        self.ids[name] = cid
        return cid

    def delete(self, name: str) -> None:
        pod = self.pods.pop(name)
        self.cri.stop_pod(pod)
        self.cri.remove_pod(pod)
        self.ids.pop(name, None)

    def view(self, name: str) -> dict[str, str]:
        cid, c = self.ids[name], self.cri
        return {"spec": c.spec_cpus(cid), "cgroup": c.cgroup_cpus(cid), "proc": c.proc_cpus(cid),
                "spec_mems": c.spec_mems(cid), "cgroup_mems": c.cgroup_mems(cid),
                "proc_mems": c.proc_mems(cid), "cgroups_path": c.cgroups_path(cid)}

    def record(self, step: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        rec = {"step": step, "containers": {n: {**self.spec[n], **self.view(n)}
                                            for n in self.ids},
               "refused": dict(self.refused), **(extra or {})}
        self.steps.append(rec)
        return rec

    def wait_shared(self, names: list[str], expect: Callable[[], str],
                    timeout: float = SETTLE) -> float:
        """Wait until every ``names`` container's cgroup cpus equal ``expect()``; seconds."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if all(self.cri.cgroup_cpus(self.ids[n]) == expect() for n in names):
                break
            time.sleep(0.5)
        return round(time.monotonic() - t0, 1)


def exclusive_union(run: Run, names: list[str]) -> str:
    from nri_cpumgr.cpuset import CPUSet

    cpus: set[int] = set()
    for n in names:
        if n in run.ids:
            cpus |= set(CPUSet.parse(run.cri.spec_cpus(run.ids[n])))
    return str(CPUSet(set(CPUSet.parse(cg.host_online_cpus())) - cpus))


# ----------------------------------------------------------------------------- scenarios

def scenario_docs(run: Run, topo: dict[str, Any]) -> dict[str, Any]:
    """The docs' example pods; then a Guaranteed pod goes and the shared pool grows back."""
    for n, spec in SHARED_PODS.items():
        run.make(n, *spec)
    run.make("guaranteed-2cpu", *g(2))
    run.make("guaranteed-4cpu", *g(4))
    shared = list(SHARED_PODS)
    t = run.wait_shared(shared, lambda: exclusive_union(run, ["guaranteed-2cpu",
                                                              "guaranteed-4cpu"]))
    run.record("allocated", {"shrink_seconds": t})
    run.delete("guaranteed-4cpu")
    t = run.wait_shared(shared, lambda: exclusive_union(run, ["guaranteed-2cpu"]))
    run.record("released guaranteed-4cpu", {"grow_seconds": t})
    return {}


def scenario_full_pcpus(run: Run, topo: dict[str, Any]) -> dict[str, Any]:
    """full-pcpus-only: an odd CPU count is refused (SMT), whole cores are given."""
    run.make("besteffort", *SHARED_PODS["besteffort"])
    run.make("guaranteed-1cpu", *g(1))
    run.make("guaranteed-2cpu", *g(2))
    run.make("guaranteed-4cpu", *g(4))
    t = run.wait_shared(["besteffort"], lambda: exclusive_union(
        run, ["guaranteed-2cpu", "guaranteed-4cpu"]))
    run.record("allocated", {"shrink_seconds": t})
    return {}


def numa_pages(pid: int) -> dict[str, int]:
    """Anonymous pages of ``pid`` per NUMA node, from /proc/<pid>/numa_maps (``N<n>=pages``
    of the mappings marked ``anon=`` or ``heap``)."""
    pages: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/numa_maps").read_text().splitlines():
        if "anon=" not in line and " heap" not in line:
            continue
        for node, n in re.findall(r"\bN(\d+)=(\d+)", line):
            pages[node] = pages.get(node, 0) + int(n)
    return pages


def scenario_numa_mem(run: Run, topo: dict[str, Any]) -> dict[str, Any]:
    """single-numa-node + Memory Manager Static: CPUs and memory of one node, mems applied,
    the allocated memory on that node; a pod no single node can hold is refused."""
    per_node = min(len(n["cpus"]) for n in topo["numa"])
    pages: dict[str, dict[str, int]] = {}

    def allocated(n: str) -> None:
        """Wait for ``n``'s shell to write /tmp/allocated, then count its pages per node.
        Before the next pod: the allocation keeps a vCPU busy, and on a loaded host the
        next pod's sandbox (its shim starting) then overran the 120 s CRI deadline (seen
        in 2 of 3 runs at load 24-49, 2026-12-06)."""
        if n not in run.ids:
            return
        pid = run.cri.inspect(run.ids[n])[0]
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline:  # the shell writes /tmp/allocated when done
            if Path(f"/proc/{pid}/root/tmp/allocated").exists():
                break
            time.sleep(0.5)
        pages[n] = numa_pages(pid)

    run.make("besteffort", *SHARED_PODS["besteffort"])
    run.make("numa-small", *g(2, "256Mi"), command=ALLOC_CMD)
    allocated("numa-small")
    run.make("numa-node", *g(per_node, "256Mi"), command=ALLOC_CMD)
    allocated("numa-node")
    run.make("numa-too-big", *g(per_node))
    t = run.wait_shared(["besteffort"], lambda: exclusive_union(
        run, ["numa-small", "numa-node"]))
    run.record("allocated", {"shrink_seconds": t, "numa_pages": pages,
                             "alloc_pages": ALLOC_MB * 1000000 // 4096})
    return {}


def scenario_distribute(run: Run, topo: dict[str, Any]) -> dict[str, Any]:
    """distribute-cpus-across-numa: a pod larger than any node's free CPUs is spread evenly
    over the nodes instead of filling one first."""
    per_node = min(len(n["cpus"]) for n in topo["numa"])
    run.make("besteffort", *SHARED_PODS["besteffort"])
    run.make("spread", *g(per_node + 2))
    t = run.wait_shared(["besteffort"], lambda: exclusive_union(run, ["spread"]))
    run.record("allocated", {"shrink_seconds": t})
    return {}


def scenario_socket(run: Run, topo: dict[str, Any]) -> dict[str, Any]:
    """align-by-socket (with distribute-cpus-across-numa): a pod spread over two NUMA nodes
    takes two nodes of one socket."""
    per_node = min(len(n["cpus"]) for n in topo["numa"])
    run.make("besteffort", *SHARED_PODS["besteffort"])
    run.make("socket-pod", *g(2 * per_node))
    t = run.wait_shared(["besteffort"], lambda: exclusive_union(run, ["socket-pod"]))
    run.record("allocated", {"shrink_seconds": t})
    return {}


def scenario_uncore(run: Run, topo: dict[str, Any]) -> dict[str, Any]:
    """prefer-align-cpus-by-uncorecache: a pod that fits one L3 group gets one."""
    run.make("besteffort", *SHARED_PODS["besteffort"])
    run.make("l3-pod", *g(2))
    t = run.wait_shared(["besteffort"], lambda: exclusive_union(run, ["l3-pod"]))
    run.record("allocated", {"shrink_seconds": t})
    return {}


def scenario_strict(run: Run, topo: dict[str, Any]) -> dict[str, Any]:
    """strict-cpu-reservation: the reserved CPUs leave the shared pool too."""
    for n in ("besteffort", "burstable-cpu"):
        run.make(n, *SHARED_PODS[n])
    run.make("guaranteed-2cpu", *g(2))

    def pool() -> str:  # online - exclusive - reserved ("0", tests/e2e/plugin_run.py)
        from nri_cpumgr.cpuset import CPUSet
        return str(CPUSet(set(CPUSet.parse(exclusive_union(run, ["guaranteed-2cpu"]))) - {0}))

    t = run.wait_shared(["besteffort", "burstable-cpu"], pool)
    run.record("allocated", {"shrink_seconds": t})
    return {}


def scenario_churn(run: Run, topo: dict[str, Any]) -> dict[str, Any]:
    """Pods come and go while the plugin is killed (SIGKILL) and started again; afterwards
    the invariants hold (disjoint exclusive sets, shared pool, the three views agree)."""
    run.make("besteffort", *SHARED_PODS["besteffort"])
    plugin = run.plugin
    assert plugin is not None
    for i in range(3):
        run.make(f"churn-{i}", *g(1 + i % 2))
    run.delete("churn-0")
    plugin.kill(signal.SIGKILL)
    plugin.wait(30)
    run.make("churn-3", *g(2))  # created while the plugin is away: no adjustment
    since, psince = run.ctrd.log_offset(), plugin.log_offset()
    plugin.start()
    run.ctrd.wait_plugin_ready("cpumgr", "90", timeout=90, since=since)
    plugin.wait_for_log("synchronize pods=", timeout=90, since=psince)
    run.delete("churn-1")
    run.make("churn-4", *g(1))
    names = [n for n in run.ids if n.startswith("churn-")]
    t = run.wait_shared(["besteffort"], lambda: exclusive_union(run, names))
    run.record("after churn", {"shrink_seconds": t})
    return {}


SCENARIOS: dict[str, tuple[Callable[[Run, dict[str, Any]], dict[str, Any]], dict[str, Any]]] = {
    "docs": (scenario_docs, {}),
    "full-pcpus-only": (scenario_full_pcpus,
                        {"cpuManagerPolicyOptions": {"full-pcpus-only": "true"}}),
    "numa-memory": (scenario_numa_mem, {
        "topologyManagerPolicy": "single-numa-node",
        "memoryManagerPolicy": "Static",
        "reservedMemory": [{"numaNode": 0, "limits": {"memory": "100Mi"}}],
    }),
    "distribute-cpus-across-numa": (scenario_distribute, {
        "cpuManagerPolicyOptions": {"distribute-cpus-across-numa": "true"}}),
    "prefer-align-cpus-by-uncorecache": (scenario_uncore, {
        "cpuManagerPolicyOptions": {"prefer-align-cpus-by-uncorecache": "true"}}),
    "align-by-socket": (scenario_socket, {
        "featureGates": {"CPUManagerPolicyAlphaOptions": True},
        "cpuManagerPolicyOptions": {"distribute-cpus-across-numa": "true",
                                    "align-by-socket": "true"}}),
    "strict-cpu-reservation": (scenario_strict, {
        "cpuManagerPolicyOptions": {"strict-cpu-reservation": "true"}}),
    "churn-plugin-kill": (scenario_churn, {}),
}



def scenario(name: str) -> tuple[Callable[[Run, dict[str, Any]], dict[str, Any]],
                                 dict[str, Any]]:
    """The function and config of scenario ``name``: :data:`SCENARIOS`, then the live
    reconfiguration ones (tests/vm/guest_reconfigure.py, imported here: it imports this
    module)."""
    if name in SCENARIOS:
        return SCENARIOS[name]
    from tests.vm.guest_reconfigure import SCENARIOS as RECONFIGURE

    return RECONFIGURE[name]


# ----------------------------------------------------------------------------- driver

def for_driver(names: list[str], driver: str) -> list[str]:
    """The job's scenarios run with ``driver``: a name ``scenario@driver`` runs with that
    driver only (the live reconfiguration ones: tests/vm/reconfigure_checks.py)."""
    out = []
    for n in names:
        base, _, only = n.partition("@")
        if not only or only == driver:
            out.append(base)
    return out


def guest_facts() -> dict[str, Any]:
    """What the guest kernel reports: cpus, cgroup v2 controllers, sysfs topology."""
    sysd = Path("/sys/devices/system/cpu")
    cpus = {}
    for c in sorted(sysd.glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        t = c / "topology"
        l3 = c / "cache/index3/shared_cpu_list"
        cpus[c.name[3:]] = {
            "socket": int((t / "physical_package_id").read_text()),
            "die": int((t / "die_id").read_text()) if (t / "die_id").exists() else 0,
            "siblings": (t / "thread_siblings_list").read_text().strip(),
            "l3": l3.read_text().strip() if l3.exists() else "",
        }
    nodes = {n.name[4:]: (n / "cpulist").read_text().strip()
             for n in Path("/sys/devices/system/node").glob("node[0-9]*")}
    return {"online": cg.host_online_cpus(), "cgroup_version": cg.cgroup_version(),
            "controllers": Path("/sys/fs/cgroup/cgroup.controllers").read_text().split(),
            "cpus": cpus, "numa": nodes, "kernel": os.uname().release}


def run_one(version: str, driver: str, name: str, topo: dict[str, Any],
            ctrd: Containerd, work: Path) -> dict[str, Any]:
    fn, config = scenario(name)
    res: dict[str, Any] = {"scenario": name, "containerd": version, "driver": driver,
                           "config": config}
    t0 = time.monotonic()
    wd = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work))
    cri = ctrd.cri_client(cgroup_driver=driver, timeout=120)
    run = Run(cri, ctrd)
    plugin = None
    try:
        # the shipped sharedPoolUpdateMode: the scenarios check that released CPUs go back to
        # the shared containers on an idle node, which auto's cri path (containerd 1.7 / 2.1:
        # CRI UpdateContainerResources on the harness containerd's socket) and async path
        # (2.4) both do (issue 31, docs/concepts/nri-lock-order.md)
        keys = {"sharedPoolGrowDelay": "1s", **config}
        plugin = start_plugin(ctrd, wd, ready_timeout=90, **keys)
        run.plugin = plugin
        res.update(fn(run, topo))
        res["error"] = None
    except Exception as e:  # recorded, judged on the host; the next scenario still runs
        res["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"
    res["steps"] = run.steps
    res["refused"] = run.refused
    errors = cri.cleanup()
    res["cleanup_errors"] = errors
    cri.close()
    if plugin is not None:
        plugin.stop()
        res["plugin_log_tail"] = plugin.log_text()[-4000:]
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--job", required=True, type=Path, help="job.json written by the host")
    ap.add_argument("--out", required=True, type=Path, help="results.json to write")
    a = ap.parse_args(argv)
    if not GUEST_MARK.exists():
        raise SystemExit(f"{GUEST_MARK} missing: this runs only inside the nri-cpumgr VM guest")
    job = json.loads(a.job.read_text())
    out: dict[str, Any] = {"job": job, "facts": guest_facts(), "results": []}

    def save() -> None:
        tmp = a.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(out, indent=1))
        os.replace(tmp, a.out)

    save()
    if job.get("kubelet"):  # the real kubelet 1.37 (tests/vm/guest_kubelet.py)
        from tests.vm.guest_kubelet import run_kubelet_job

        run_kubelet_job(job, a.job.parent / "files", out, save)
    work = Path(tempfile.mkdtemp(prefix="vm-", dir="/tmp"))
    for version in job["containerd"]:
        for driver in job["drivers"]:
            ctrd = Containerd(version, work / f"c{version}-{driver[0]}",
                              nri_registration_timeout="60s", nri_request_timeout="60s",
                              start_timeout=300, systemd_cgroup=(driver == "systemd"))
            t0 = time.monotonic()
            try:
                ctrd.start()
            except Exception as e:
                # a failed command's own words (ctr images import: CalledProcessError.stderr)
                why = f"{e}\n{getattr(e, 'stderr', None) or ''}".strip()
                for name in for_driver(job["scenarios"], driver):
                    out["results"].append({"scenario": name, "containerd": version,
                                           "driver": driver, "steps": [], "refused": {},
                                           "error": f"containerd did not start: {why}"})
                save()
                with contextlib.suppress(Exception):  # start() killed it; leftovers go
                    ctrd.stop()
                if ctrd.log_path.exists():  # the log says why (kept for the host)
                    shutil.copy(ctrd.log_path, a.out.parent / f"containerd-{version}-{driver}.log")
                continue
            out.setdefault("containerd_start_seconds", {})[f"{version}/{driver}"] = round(
                time.monotonic() - t0, 1)
            for name in for_driver(job["scenarios"], driver):
                print(f"guest: containerd {version} {driver}: {name} ...", flush=True)
                res = run_one(version, driver, name, job["topology"], ctrd, work)
                print(f"guest: ... {name} {res['seconds']} s error={bool(res['error'])}",
                      flush=True)
                out["results"].append(res)
                save()
            ctrd.stop()
            shutil.copy(ctrd.log_path, a.out.parent / f"containerd-{version}-{driver}.log")
    out["done"] = True
    save()
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    raise SystemExit(main())
