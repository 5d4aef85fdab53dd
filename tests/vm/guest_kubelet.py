"""Inside the QEMU guest: a real kubelet v1.37.2 drives the guest's containerd with nri-cpumgr
as its NRI plugin, on cgroup v2; record what every container got.

Run by :mod:`tests.vm.guest_scenarios` when the job has a ``kubelet`` section (written by
:mod:`tests.vm.test_guest_kubelet` / ``scripts/vm/e2e_vm.py --kubelet``). The API server
(etcd + kube-apiserver, :mod:`tests.vm.controlplane`) runs on the host; the guest reaches it
at ``job["kubelet"]["server"]`` through QEMU's user-mode network. The kubelet, kubectl and
(for containerd "2.4") containerd 2.4.2 + runc 1.5.3 come from the host's
scripts/modern/build.sh cache, shared read-only over 9p at the same path.

Per containerd version: containerd (cgroupfs driver, host-network pods only), nri-cpumgr
(static, ``reservedSystemCPUs: "0"``, the pod-level and resize gates, ``podSpecSource:
apiServer`` with the guest's own service-account files, ``topologyManagerPolicy:
single-numa-node``), then the kubelet (cgroupRoot ``/``, ``cpuManagerPolicy: none``, the
``PodLevelResources`` gate) registering the node ``nri-vm``. Pods are created through the API
(``spec.nodeName`` set: no scheduler), resized with ``kubectl patch --subresource resize``. For
every container the cpus of the OCI spec, of cgroup v2 ``cpuset.cpus.effective``, of
``/proc/<pid>/status`` ``Cpus_allowed_list``, and its ``cpu.max`` quota are recorded in steps
of the form :mod:`tests.vm.checks` judges; phases:

1. ``topologyManagerScope: container``: the docs' pods (then the 4-CPU one goes), a sidecar
   (restartable init container) beside a 500m app container, an init container whose CPUs
   the app container reuses (the init's own ``Cpus_allowed_list`` from its log), the pod-level
   tutorial's container-scope pod, an in-place resize 2 -> 4 CPUs and a refused one;
2. the plugin restarted with ``topologyManagerScope: pod``: the tutorial's pod-scope pod (one
   bubble, main-app's slice, the sidecars on the rest) and its empty-shared-pool pod;
3. the same with ``topologyManagerPolicy: best-effort``: the empty-shared-pool pod again.

Each phase also records its plugin configuration and its events (pods created, deleted,
resized; steps recorded), from which the host asks the kubelet's own managers (the oracle,
:mod:`tests.vm.kubelet_oracle`) what every pod must get: the guest expects nothing itself
beyond waiting for the views to settle.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.e2e.harness import Containerd, CRIClient
from tests.e2e.harness import cgroups as cg
from tests.e2e.harness.images import BUSYBOX_IMAGE
from tests.e2e.harness.paths import modern_bin_dir
from tests.e2e.plugin_run import start_plugin

NODE = "nri-vm"
GUEST_IP = "10.0.2.15"  # QEMU slirp's first guest address (guest-run.sh sets it)
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
GATES = {"PodLevelResources": True, "PodLevelResourceManagers": True,
         "InPlacePodVerticalScalingExclusiveCPUs": True}
KUBELET_GATES = {"PodLevelResources": True}
MEM = "100Mi"
WAIT = 240.0  # seconds for a container to run (TCG: sandbox + create + start can take 20 s)
SETTLE = 90.0


class KubeletError(RuntimeError):
    """Something of the node did not happen in time (the message says what)."""


def _utc_now() -> str:
    """Now, as the runtime's logs write it (UTC, microseconds)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _wait(pred: Any, timeout: float, what: str, interval: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(interval)
    raise KubeletError(f"timed out after {timeout:.0f} s waiting for {what}"
                       + (f" (last error: {last})" if last else ""))


class API:
    """The few API calls the scenarios make (urllib, the admin token); kubectl for resize and
    describe, as a user types them."""

    def __init__(self, server: str, token: str, ca: Path, kubeconfig: Path) -> None:
        self.server, self.token, self.kubeconfig = server, token, kubeconfig
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.kubectl_bin = modern_bin_dir("kubernetes", "KUBERNETES_VERSION") / "kubectl"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.ctx) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def pod(self, name: str) -> dict[str, Any] | None:
        code, obj = self.call("GET", f"/api/v1/namespaces/default/pods/{name}")
        return obj if code == 200 else None

    def create(self, manifest: dict[str, Any]) -> None:
        code, obj = self.call("POST", "/api/v1/namespaces/default/pods", manifest)
        if code != 201:
            raise KubeletError(f"create pod {manifest['metadata']['name']}: {code} {obj}")

    def delete(self, name: str) -> None:
        self.call("DELETE", f"/api/v1/namespaces/default/pods/{name}",
                  {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})

    def kubectl(self, *args: str, check: bool = True) -> str:
        r = subprocess.run([str(self.kubectl_bin), f"--kubeconfig={self.kubeconfig}", *args],
                           capture_output=True, text=True, timeout=120)
        if check and r.returncode != 0:
            raise KubeletError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout


def container(name: str, cpu: str | None, mem: str = MEM, **extra: Any) -> dict[str, Any]:
    res = {} if cpu is None else {"requests": {"cpu": cpu, "memory": mem},
                                  "limits": {"cpu": cpu, "memory": mem}}
    return {"name": name, "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
            "command": ["sleep", "3600"], "resources": res, **extra}


def pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": NODE, "hostNetwork": True, "terminationGracePeriodSeconds": 0,
                     "enableServiceLinks": False, "automountServiceAccountToken": False,
                     "containers": containers, **spec}}


def _res(req: dict[str, str], lim: dict[str, str]) -> dict[str, Any]:
    return {k: v for k, v in (("requests", req), ("limits", lim)) if v}


# The docs' example pods (Kubernetes "Control CPU Management Policies on the Node"), as
# tests/vm/guest_scenarios.py runs them through CRI
DOCS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "besteffort": ({}, {}),
    "burstable-mem": ({"memory": "50Mi"}, {"memory": MEM}),
    "burstable-cpu": ({"cpu": "500m"}, {"cpu": "1"}),
    "guaranteed-frac": ({"cpu": "1500m", "memory": MEM}, {"cpu": "1500m", "memory": MEM}),
    "guaranteed-2cpu": ({"cpu": "2", "memory": MEM}, {"cpu": "2", "memory": MEM}),
    "guaranteed-4cpu": ({"cpu": "4", "memory": MEM}, {"cpu": "4", "memory": MEM}),
}


class Node:
    """The guest's node: containerd + nri-cpumgr + kubelet, and what the scenarios record."""

    def __init__(self, version: str, job: dict[str, Any], work: Path, files: Path) -> None:
        self.version, self.job, self.work = version, job, work
        self.files = files
        self.api = API(job["server"], (files / "token").read_text().strip(), files / "ca.crt",
                       files / "kubeconfig")
        self.ctrd = Containerd(version, work / f"k{version}", nri_registration_timeout="60s",
                               nri_request_timeout="60s", start_timeout=300)
        self.cri: CRIClient | None = None
        self.plugin: Any = None
        self.kubelet: subprocess.Popen[bytes] | None = None
        self.steps: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.config: dict[str, Any] = {}
        self.extra: dict[str, Any] = {}

    # -- the processes
    def start(self) -> None:
        self.ctrd.start()
        self.cri = CRIClient(self.ctrd.cri_socket, timeout=120)
        self.start_plugin("container")
        self.start_kubelet()

    def start_plugin(self, scope: str, policy: str = "single-numa-node") -> None:
        """(Re)start nri-cpumgr with ``topologyManagerScope`` ``scope`` and
        ``topologyManagerPolicy`` ``policy``; its decision-relevant keys are kept in
        :attr:`config` (what the oracle is given for the phase's pods)."""
        if self.plugin is not None:
            self.plugin.stop()
        wd = self.work / "plugin"
        wd.mkdir(exist_ok=True)
        self.config = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0",
                       "featureGates": GATES, "topologyManagerPolicy": policy,
                       "topologyManagerScope": scope}
        self.plugin = start_plugin(
            self.ctrd, wd, ready_timeout=120, sharedPoolGrowDelay="1s",
            podSpecSource="apiServer",
            apiServerURL=self.job["server"], nodeName=NODE, **self.config)
        self.plugin.wait_for_log(re.compile(r"pod spec source: \d+ pods of node"), timeout=90)

    def start_kubelet(self) -> None:
        from tests.cluster.node import kubelet_config

        kw = self.work / "kubelet"
        kw.mkdir(exist_ok=True)
        spec = {"flavor": "1.37", "cgroup_root": "/", "cri_socket": str(self.ctrd.cri_socket),
                "feature_gates": KUBELET_GATES}
        cfg = kubelet_config(spec, kw)
        cfg.update(address=GUEST_IP, protectKernelDefaults=False, failCgroupV1=False,
                   nodeStatusUpdateFrequency="4s")
        (kw / "config.json").write_text(json.dumps(cfg, indent=1))
        kubelet = modern_bin_dir("kubernetes", "KUBERNETES_VERSION") / "kubelet"
        # the log straight into the job directory (9p): readable on the host while it runs
        log = open(self.kubelet_log_path, "ab")  # noqa: SIM115 - for the process' life
        self.kubelet = subprocess.Popen(
            [str(kubelet), f"--config={kw / 'config.json'}",
             f"--kubeconfig={self.files / 'kubeconfig'}", "--runtime-request-timeout=5m",
             f"--root-dir={kw / 'root'}", f"--hostname-override={NODE}",
             f"--node-ip={GUEST_IP}", "--v=2"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        t0 = time.monotonic()

        def registered() -> bool:
            if self.kubelet is not None and self.kubelet.poll() is not None:
                raise KubeletError("the kubelet exited:\n" + self.kubelet_log()[-3000:])
            code, node = self.api.call("GET", f"/api/v1/nodes/{NODE}")
            info = node["status"].get("nodeInfo", {}) if code == 200 else {}
            # this version's runtime: in a boot running 2.1 then 2.4 the node object is
            # still the 2.1 kubelet's until the new kubelet's first status update
            return bool(info.get("kubeletVersion")) and str(
                info.get("containerRuntimeVersion", "")).startswith(
                f"containerd://{self.version}.")

        _wait(registered, 300, f"the kubelet to register the node on containerd {self.version}")
        self.extra["kubelet_register_seconds"] = round(time.monotonic() - t0, 1)
        self.extra["node_info"] = self.api.call("GET", f"/api/v1/nodes/{NODE}")[1][
            "status"]["nodeInfo"]

    @property
    def kubelet_log_path(self) -> Path:
        return self.files.parent / f"kubelet-{self.version}.log"

    def kubelet_log(self) -> str:
        p = self.kubelet_log_path
        return p.read_text(errors="replace") if p.exists() else ""

    def stop(self) -> list[str]:
        problems: list[str] = []
        if self.kubelet is not None and self.kubelet.poll() is None:
            self.kubelet.terminate()
            try:
                self.kubelet.wait(30)
            except subprocess.TimeoutExpired:
                self.kubelet.kill()
                self.kubelet.wait(10)
        if self.plugin is not None:
            self.plugin.stop()
        if self.cri is not None:
            self.cri.close()
        problems += self.ctrd.stop(cleanup=True)
        return problems

    # -- pods
    def statuses(self, name: str) -> dict[str, dict[str, Any]]:
        p = self.api.pod(name) or {}
        st = p.get("status", {})
        return {s["name"]: s for s in (st.get("containerStatuses") or [])
                + (st.get("initContainerStatuses") or [])}

    def running(self, name: str, ctr: str) -> str:
        s = self.statuses(name).get(ctr, {})
        if not s.get("state", {}).get("running") or not s.get("containerID"):
            return ""
        return str(s["containerID"]).split("://", 1)[1]

    def wait_running(self, name: str, ctr: str) -> str:
        try:
            return _wait(lambda: self.running(name, ctr), WAIT, f"{name}/{ctr} running")
        except KubeletError as e:
            raise KubeletError(f"{e}\n{self.describe(name)[-2500:]}") from None

    def describe(self, name: str) -> str:
        return self.api.kubectl("describe", "pod", name, "-n", "default", check=False)

    def view(self, cid: str) -> dict[str, Any]:
        c = self.cri
        assert c is not None
        path = c.cgroups_path(cid)
        return {"spec": c.spec_cpus(cid), "cgroup": c.cgroup_cpus(cid), "proc": c.proc_cpus(cid),
                "spec_mems": c.spec_mems(cid), "cgroup_mems": c.cgroup_mems(cid),
                "proc_mems": c.proc_mems(cid), "cgroups_path": path,
                "cpu_max": cg.read_cgroup_file("cpu", path, "cpu.max")}

    def entry(self, name: str, ctr: str, cid: str) -> dict[str, Any]:
        """What check_step needs of a container (qos of its pod, its own requests/limits)
        and the views."""
        p = self.api.pod(name) or {}
        spec = next(c for c in p["spec"].get("containers", []) + p["spec"].get(
            "initContainers", []) if c["name"] == ctr)
        # what the kubelet applied (the status' resources: after a refused resize the spec
        # asks for more than the container has), else the spec's
        st = self.statuses(name).get(ctr, {})
        res = spec.get("resources") or {}
        if res and st.get("resources"):
            res = st["resources"]
        return {"qos": p["status"].get("qosClass", ""), "requests": res.get("requests", {}),
                "limits": res.get("limits", {}), "pod": name, "container": ctr, "id": cid,
                **self.view(cid)}

    def record(self, step: str, containers: dict[str, tuple[str, str, str]],
               **extra: Any) -> dict[str, Any]:
        """``containers``: key -> (pod, container, id). ``at``: when the views began to be
        read (UTC, the guest's clock: the one of the runtime's, kubelet's and plugin's logs)."""
        rec = {"step": step, "at": _utc_now(), "refused": {},
               "containers": {k: self.entry(p, c, i) for k, (p, c, i) in containers.items()},
               **extra}
        self.steps.append(rec)
        self.events.append({"op": "step", "step": step})
        return rec

    def outcome(self, name: str, ctrs: list[str]) -> tuple[dict[str, str], dict[str, str]]:
        """Wait until every container ``ctrs`` of pod ``name`` runs or is refused (waiting
        with a message naming an error, as a CreateContainer the plugin fails shows);
        (container -> id of the running ones, container -> message of the refused ones).
        Records what happened, expects nothing: the oracle judges it."""
        def done() -> tuple[dict[str, str], dict[str, str]] | None:
            st = self.statuses(name)
            run, ref = {}, {}
            for c in ctrs:
                s = st.get(c, {})
                if s.get("state", {}).get("running") and s.get("containerID"):
                    run[c] = str(s["containerID"]).split("://", 1)[1]
                    continue
                msg = str(s.get("state", {}).get("waiting", {}).get("message", ""))
                if re.search(r"\b\w+Error\b", msg):
                    ref[c] = msg
            return (run, ref) if len(run) + len(ref) == len(ctrs) else None

        try:
            return _wait(done, WAIT, f"every container of {name} running or refused")
        except KubeletError as e:
            raise KubeletError(f"{e}\n{self.describe(name)[-2500:]}") from None

    def wait_cpus(self, cid: str, pred: Any, what: str, timeout: float = SETTLE) -> float:
        """Wait until the three views agree and ``pred(cpus)`` holds; seconds taken."""
        t0 = time.monotonic()
        last: dict[str, Any] = {}

        def ok() -> bool:
            last.update(self.view(cid))
            return last["spec"] == last["cgroup"] == last["proc"] and bool(pred(last["cgroup"]))

        try:
            _wait(ok, timeout, what, interval=0.5)
        except KubeletError as e:
            raise KubeletError(f"{e}; last seen: spec={last.get('spec')} cgroup="
                               f"{last.get('cgroup')} proc={last.get('proc')}") from None
        return round(time.monotonic() - t0, 1)

    def all_views(self) -> dict[str, Any]:
        """pod/container -> view of every running container (for a failure's report)."""
        out: dict[str, Any] = {}
        assert self.cri is not None
        for c in self.cri.list_containers():
            if c.state != 1:  # CONTAINER_RUNNING
                continue
            key = f"{c.labels.get('io.kubernetes.pod.name')}/{c.metadata.name}"
            try:
                out[key] = self.view(c.id)
            except Exception as e:  # noqa: BLE001 - a report
                out[key] = str(e)
        return out

    def delete_all(self) -> None:
        """Delete every pod of the namespace (after a phase, failed or not)."""
        code, lst = self.api.call("GET", "/api/v1/namespaces/default/pods")
        names = [p["metadata"]["name"] for p in (lst or {}).get("items", [])] if code == 200 \
            else []
        if names:
            self.delete(*names)

    def create(self, manifest: dict[str, Any]) -> None:
        """Create a pod through the API, kept in :attr:`events` (the oracle replays them:
        consecutive creations are concurrent, the kubelet may admit them in any order)."""
        self.events.append({"op": "add", "pod": manifest})
        self.api.create(manifest)

    def delete(self, *names: str) -> None:
        for n in names:
            self.events.append({"op": "delete", "name": n})
            self.api.delete(n)
        _wait(lambda: all(self.api.pod(n) is None for n in names), 120,
              f"pods {names} deleted")
        # the kubelet stops the sandboxes after the objects are gone: wait for CRI too
        assert self.cri is not None

        def gone() -> bool:
            assert self.cri is not None
            return not any(p.metadata.name in names for p in self.cri.list_pods()
                           if p.state == 0)  # SANDBOX_READY

        _wait(gone, 120, f"sandboxes of {names} stopped")

    def pool(self) -> str:
        """The shared pool as the plugin has it now (its checkpoint's defaultCpuSet)."""
        from nri_cpumgr.checkpoint import Checkpoint

        cp = Checkpoint(self.work / "plugin/state/cpu_manager_state").load() or {}
        return str(cp.get("defaultCpuSet", ""))


# ----------------------------------------------------------------------------- scenarios

def docs_pods(n: Node) -> dict[str, Any]:
    """The docs' example pods through the kubelet; then the 4-CPU pod goes and the shared
    containers get its CPUs back. Steps in the form checks.check's ``docs`` judges."""
    for name, (req, lim) in DOCS.items():
        n.create(pod(name, [{**container("app", None), "resources": _res(req, lim)}]))
    ids = {name: n.wait_running(name, "app") for name in DOCS}
    excl = {"guaranteed-2cpu": 2, "guaranteed-4cpu": 4}
    for name, size in excl.items():
        n.wait_cpus(ids[name], lambda s, k=size: len(cg_cpus(s)) == k, f"{name} pinned")
    taken = set().union(*(cg_cpus(n.view(ids[k])["spec"]) for k in excl))
    online = cg_cpus(cg.host_online_cpus())
    t = n.wait_cpus(ids["besteffort"], lambda s: cg_cpus(s) == online - taken,
                    "the shared pool to shrink")
    n.record("allocated", {k: (k, "app", v) for k, v in ids.items()}, shrink_seconds=t)
    n.delete("guaranteed-4cpu")
    del ids["guaranteed-4cpu"]
    taken = cg_cpus(n.view(ids["guaranteed-2cpu"])["spec"])
    t = n.wait_cpus(ids["besteffort"], lambda s: cg_cpus(s) == online - taken,
                    "the shared pool to grow back")
    n.record("released guaranteed-4cpu", {k: (k, "app", v) for k, v in ids.items()},
             grow_seconds=t)
    n.delete(*ids)
    return {}


def cg_cpus(text: str) -> frozenset[int]:
    from nri_cpumgr.cpuset import CPUSet

    return frozenset(CPUSet.parse(text)) if text else frozenset()


def sidecar_and_init(n: Node) -> dict[str, Any]:
    """A restartable init container (sidecar) with a whole CPU beside a 500m app container;
    an init container with 2 CPUs that prints its Cpus_allowed_list, whose CPUs the app
    container (2 CPUs) reuses. A BestEffort witness shows the shared pool."""
    n.create(pod("witness", [container("app", None)]))
    side = container("sidecar", "1", restartPolicy="Always")
    n.create(pod("sidecar", [container("app", "500m")], initContainers=[side]))
    w = n.wait_running("witness", "app")
    sid, app = n.wait_running("sidecar", "sidecar"), n.wait_running("sidecar", "app")
    n.wait_cpus(sid, lambda s: len(cg_cpus(s)) == 1, "the sidecar pinned")
    online = cg_cpus(cg.host_online_cpus())
    t = n.wait_cpus(w, lambda s: cg_cpus(s) == online - cg_cpus(n.view(sid)["spec"]),
                    "the shared pool without the sidecar's CPU")
    n.record("sidecar", {"witness": ("witness", "app", w), "sidecar/sidecar":
                         ("sidecar", "sidecar", sid), "sidecar/app": ("sidecar", "app", app)},
             shrink_seconds=t)
    n.delete("sidecar")
    init = container("init", "2", command=["sh", "-c",
                                           "grep Cpus_allowed_list /proc/self/status"])
    n.create(pod("init-reuse", [container("app", "2")], initContainers=[init]))
    app = n.wait_running("init-reuse", "app")
    n.wait_cpus(app, lambda s: len(cg_cpus(s)) == 2, "the app after its init container")
    uid = (n.api.pod("init-reuse") or {})["metadata"]["uid"]
    logs = sorted((n.work / "kubelet/pod-logs").glob(f"default_init-reuse_{uid}/init/*.log"))
    init_line = logs[0].read_text().strip() if logs else ""
    n.record("init-reuse", {"witness": ("witness", "app", w),
                            "init-reuse/app": ("init-reuse", "app", app)},
             init_log=init_line)
    n.delete("init-reuse", "witness")
    return {}


def container_scope(n: Node) -> dict[str, Any]:
    """The pod-level tutorial's container-scope pod (.spec.resources 4 CPUs): the
    infrastructure sidecar gets 2 exclusive CPUs from the node, the workers (no resources of
    their own) share the node's pool, never the sidecar's CPUs."""
    budget = {"requests": {"cpu": "4", "memory": "400Mi"},
              "limits": {"cpu": "4", "memory": "400Mi"}}
    n.create(pod("container-scope-mixed", [
        container("infrastructure-sidecar", "2", "200Mi"), container("worker-1", None),
        container("worker-2", None)], resources=budget))
    ids = {c: n.wait_running("container-scope-mixed", c)
           for c in ("infrastructure-sidecar", "worker-1", "worker-2")}
    n.wait_cpus(ids["infrastructure-sidecar"], lambda s: len(cg_cpus(s)) == 2,
                "the sidecar pinned")
    online = cg_cpus(cg.host_online_cpus())
    sc = cg_cpus(n.view(ids["infrastructure-sidecar"])["spec"])
    for c in ("worker-1", "worker-2"):
        n.wait_cpus(ids[c], lambda s: cg_cpus(s) == online - sc, f"{c} on the shared pool")
    n.record("container-scope-mixed", {f"container-scope-mixed/{c}": (
        "container-scope-mixed", c, i) for c, i in ids.items()})
    n.delete("container-scope-mixed")
    return {}


def _resize_patch(cpu: str) -> str:
    return json.dumps({"spec": {"containers": [{"name": "app", "resources": {
        "requests": {"cpu": cpu, "memory": MEM}, "limits": {"cpu": cpu, "memory": MEM}}}]}})


def resize(n: Node) -> dict[str, Any]:
    """In-place resize through the resize subresource: 2 -> 4 exclusive CPUs keeping the two
    it had (NRI UpdateContainer, the plugin's resize), the shared pool shrinking; then a grow
    to 8 the node cannot give (CPU 0 is reserved): refused, the pod's PodResizeInProgress
    condition says why, the container keeps its 4."""
    n.create(pod("witness", [container("app", None)]))
    policy = [{"resourceName": "cpu", "restartPolicy": "NotRequired"},
              {"resourceName": "memory", "restartPolicy": "NotRequired"}]
    n.create(pod("resize", [container("app", "2", resizePolicy=policy)]))
    w, cid = n.wait_running("witness", "app"), n.wait_running("resize", "app")
    n.wait_cpus(cid, lambda s: len(cg_cpus(s)) == 2, "the resize pod pinned")
    online = cg_cpus(cg.host_online_cpus())
    # the two pods start together: the witness may start while the plugin's update for it
    # is under way (it then reaches the spec only) and is sent again once started, up to a
    # second later (the plugin's shrink rate limit); wait for it, as every other step does
    # (a lost update still fails here)
    settled = n.wait_cpus(w, lambda s: cg_cpus(s) == online - cg_cpus(n.view(cid)["spec"]),
                          "the witness on the shared pool without the resize pod's CPUs")
    n.record("resize: before", {"witness": ("witness", "app", w),
                                "resize": ("resize", "app", cid)}, witness_seconds=settled)
    n.events.append({"op": "resize", "name": "resize", "cpu": "4"})  # the oracle stops here
    n.api.kubectl("patch", "pod", "resize", "-n", "default", "--subresource", "resize",
                  "--type", "strategic", "-p", _resize_patch("4"))
    t0 = time.monotonic()
    n.wait_cpus(cid, lambda s: len(cg_cpus(s)) == 4, "the resize to 4 CPUs")
    grow = round(time.monotonic() - t0, 1)
    n.wait_cpus(w, lambda s: cg_cpus(s) == online - cg_cpus(n.view(cid)["spec"]),
                "the shared pool after the resize")

    def status_cpu() -> str:
        # the request: the kubelet reads it back from the runtime's cpu shares; the limit it
        # cannot (an exclusive container runs without CFS quota: kubelet
        # kuberuntime_container_linux.go toKubeContainerResources leaves it unset)
        s = n.statuses("resize").get("app", {})
        return str(s.get("resources", {}).get("requests", {}).get("cpu", ""))

    try:
        _wait(lambda: status_cpu() == "4", 120, "the pod status to show a 4-CPU request")
    except KubeletError as e:
        raise KubeletError(f"{e}: {json.dumps((n.api.pod('resize') or {}).get('status'))}"
                           ) from None
    n.record("resize: 4 cpus", {"witness": ("witness", "app", w),
                                "resize": ("resize", "app", cid)}, resize_seconds=grow,
             status_cpu=status_cpu(), status_resources=n.statuses("resize")["app"].get(
                 "resources"), conditions=(n.api.pod("resize") or {}).get(
                 "status", {}).get("conditions"))
    n.api.kubectl("patch", "pod", "resize", "-n", "default", "--subresource", "resize",
                  "--type", "strategic", "-p", _resize_patch("8"))

    def refused() -> dict[str, Any] | None:
        conds = (n.api.pod("resize") or {}).get("status", {}).get("conditions", [])
        c = next((x for x in conds if x["type"] == "PodResizeInProgress"), None)
        return c if c and "NotEnoughCPUs" in c.get("message", "") else None

    cond = _wait(refused, 180, "PodResizeInProgress with the plugin's refusal")
    n.record("resize: 8 refused", {"witness": ("witness", "app", w),
                                   "resize": ("resize", "app", cid)}, condition=cond)
    n.delete("resize", "witness")
    return {}


POD_BUDGET = {"requests": {"cpu": "4", "memory": "400Mi"},
              "limits": {"cpu": "4", "memory": "400Mi"}}
"""The pod-level tutorial's pods' ``.spec.resources``: 4 CPUs, Guaranteed."""


def pod_scope(n: Node) -> dict[str, Any]:
    """The plugin restarted with ``topologyManagerScope: pod`` (``single-numa-node``): the
    tutorial's pod-scope pod (.spec.resources 4 CPUs; two sidecars without resources,
    main-app 2 CPUs): a 4-CPU NUMA-aligned bubble, main-app an exclusive 2-CPU slice, the
    sidecars on the other two, the node's shared pool without the bubble; then its
    empty-shared-pool pod (main-app 3 + metrics-sidecar 1 = the budget, logging-sidecar with
    nothing left), its outcome recorded as it is (the kubelet v1.37.2 refuses it with
    TopologyAffinityError under this policy: its CPU hints for the pod are none)."""
    n.start_plugin("pod")
    n.create(pod("witness", [container("app", None)]))
    n.create(pod("pod-scope-mixed", [
        container("metrics-sidecar", None), container("logging-sidecar", None),
        container("main-app", "2", "200Mi")], resources=POD_BUDGET))
    w = n.wait_running("witness", "app")
    ids = {c: n.wait_running("pod-scope-mixed", c)
           for c in ("metrics-sidecar", "logging-sidecar", "main-app")}
    main = ids["main-app"]
    n.wait_cpus(main, lambda s: len(cg_cpus(s)) == 2, "main-app's slice")
    n.wait_cpus(ids["metrics-sidecar"], lambda s: len(cg_cpus(s)) == 2,
                "the sidecars on the pod shared pool")
    online = cg_cpus(cg.host_online_cpus())

    def bubble() -> frozenset[int]:
        return cg_cpus(n.view(main)["spec"]) | cg_cpus(n.view(ids["metrics-sidecar"])["spec"])

    n.wait_cpus(w, lambda s: cg_cpus(s) == online - bubble(), "the node pool without the bubble")
    n.record("pod-scope-mixed", {"witness": ("witness", "app", w), **{
        f"pod-scope-mixed/{c}": ("pod-scope-mixed", c, i) for c, i in ids.items()}})
    n.delete("pod-scope-mixed")
    _empty_shared_pool(n, w)
    n.delete("witness")
    return {}


def pod_scope_best_effort(n: Node) -> dict[str, Any]:
    """The plugin restarted with ``topologyManagerPolicy: best-effort`` (pod scope): the
    empty-shared-pool pod again, beside a BestEffort witness; the kubelet v1.37.2 refuses it
    with EmptyPodSharedPoolError here (the policy admits without a hint, the CPU manager's
    allocation refuses it)."""
    n.start_plugin("pod", policy="best-effort")
    n.create(pod("witness", [container("app", None)]))
    w = n.wait_running("witness", "app")
    _empty_shared_pool(n, w)
    n.delete("witness")
    return {}


def _empty_shared_pool(n: Node, witness: str) -> None:
    """The tutorial's empty-shared-pool pod: every container's outcome (running, or refused
    with the message of its pod status) and the error names ``kubectl describe pod`` shows,
    recorded in the step ``empty-shared-pool``."""
    ctrs = ["metrics-sidecar", "logging-sidecar", "main-app"]
    n.create(pod("empty-shared-pool", [
        container("metrics-sidecar", "1", "100Mi"), container("logging-sidecar", None),
        container("main-app", "3", "200Mi")], resources=POD_BUDGET))
    run, ref = n.outcome("empty-shared-pool", ctrs)
    desc = n.describe("empty-shared-pool")
    key = "empty-shared-pool/{}".format
    n.record("empty-shared-pool", {"witness": ("witness", "app", witness), **{
        key(c): ("empty-shared-pool", c, i) for c, i in run.items()}},
        refused={key(c): m for c, m in ref.items()},
        describe_errors=sorted(set(re.findall(r"\b\w+Error\b", desc))))
    n.delete("empty-shared-pool")


PHASES = [docs_pods, sidecar_and_init, container_scope, resize, pod_scope,
          pod_scope_best_effort]


def run_kubelet_job(job: dict[str, Any], files: Path, out: dict[str, Any],
                    save: Any) -> None:
    """Every containerd version of ``job["kubelet"]["containerd"]``: the node, then every
    phase; each phase's result appended to ``out["kubelet_results"]`` (saved after each)."""
    kj = job["kubelet"]
    _service_account(files)
    out.setdefault("kubelet_results", [])
    for version in kj["containerd"]:
        work = Path(tempfile.mkdtemp(prefix="kub-", dir="/tmp"))
        node = Node(version, kj, work, files)
        t0 = time.monotonic()
        try:
            node.start()
        except Exception as e:
            out["kubelet_results"].append({"containerd": version, "scenario": "node",
                                           "error": f"{type(e).__name__}: {e}\n"
                                                    + traceback.format_exc()[-2000:],
                                           "kubelet_log": node.kubelet_log()[-4000:]})
            node.stop()
            save()
            continue
        # a second boot (runner.run_guest boots again after a guest kernel crash) meets the
        # first one's pods in the same API server: start from none
        try:
            code, lst = node.api.call("GET", "/api/v1/namespaces/default/pods")
            node.extra["stale_pods"] = len((lst or {}).get("items", [])) if code == 200 else -1
            node.delete_all()
        except Exception as e:  # noqa: BLE001 - the phases will say what is wrong
            node.extra["stale_pods_error"] = f"{type(e).__name__}: {e}"
        out.setdefault("kubelet_node", {})[version] = {
            "start_seconds": round(time.monotonic() - t0, 1), **node.extra}
        save()
        only = kj.get("phases")
        for fn in [f for f in PHASES if not only or f.__name__ in only]:
            print(f"guest: kubelet containerd {version}: {fn.__name__} ...", flush=True)
            t1 = time.monotonic()
            node.steps, node.events = [], []
            res: dict[str, Any] = {"containerd": version, "scenario": fn.__name__}
            try:
                res.update(fn(node))
                res["error"] = None
            except Exception as e:  # recorded; the next phase still runs
                res["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2500:]}"
                res["kubelet_log"] = node.kubelet_log()[-3000:]
                res["views"] = node.all_views()
            try:
                node.delete_all()
            except Exception as e:  # noqa: BLE001 - said in the result; next phase runs
                res["cleanup_error"] = f"{type(e).__name__}: {e}"
            res["steps"] = node.steps
            res["events"] = node.events
            res["config"] = dict(node.config)
            res["refused"] = {}
            res["plugin_log_tail"] = node.plugin.log_text()[-3000:] if node.plugin else ""
            res["seconds"] = round(time.monotonic() - t1, 1)
            print(f"guest: ... {fn.__name__} {res['seconds']} s error={bool(res['error'])}",
                  flush=True)
            out["kubelet_results"].append(res)
            save()
        problems = node.stop()
        out["kubelet_node"][version]["cleanup"] = problems
        for src in (work / "plugin/plugin.log", node.ctrd.log_path):
            if src.exists():
                (files.parent / f"{src.stem}-{version}.log").write_bytes(src.read_bytes())
        save()


def _service_account(files: Path) -> None:
    """The plugin's in-cluster credentials (podsource reads them from SA_DIR)."""
    SA_DIR.mkdir(parents=True, exist_ok=True)
    (SA_DIR / "token").write_text((files / "token").read_text())
    (SA_DIR / "ca.crt").write_text((files / "ca.crt").read_text())
    os.environ.setdefault("NODE_NAME", NODE)
