"""nri-cpumgr on a modern node: kubelet 1.37.2 + control plane (scripts/modern/build.sh, from
Go modules) with containerd 2.x (``NRI_CLUSTER_CONTAINERD``, comma separated: "2.1" Debian's
2.1.9, "2.4" the modern build's 2.4.2 with runc 1.5.3; default "2.1"), the DaemonSet installed
with the Helm chart (deploy/helm/nri-cpumgr).

The host is cgroup v1: the kubelet runs with ``failCgroupV1: false`` (1.35+ refuse v1
otherwise), in the private namespaces of tests/cluster/node.py like the 1.20.2 cluster. Checked
through the real kubelet, each in the OCI spec, the cgroup and /proc:

* the docs' example pods (BestEffort and Burstable on the shared CPU 0, Guaranteed 1-CPU alone
  on CPU 1);
* a sidecar (restartable init container) with an exclusive CPU beside a fractional app
  container, and an init container whose CPU the app container reuses;
* in-place resize through the ``resize`` subresource: a memory resize of a pinned container
  reaches the plugin as UpdateContainer and keeps its CPU; a CPU grow the node cannot give is
  refused by the plugin (NotEnoughCPUs) and the pod's status says so;
* a refusal at creation visible in ``kubectl describe pod``;
* ``helm upgrade`` with ``topologyManagerScope: pod`` rolls the DaemonSet (the config
  checksum); then a pod with ``.spec.resources`` (PodLevelResources, on by default in 1.37)
  and containers without resources runs on its pod's bubble (CPU 1);
* the NodeResourceTopology object follows the exclusive CPU;
* the operator's pages run as written (tests/cluster/operator_steps.py): the quick start's
  install (steps 3-4: the namespace, its Pod Security label, ``helm install`` with the
  example values file; the fixture) and its check (step 5: the plugin's log, the example
  Guaranteed pod's ``Cpus_allowed_list``, ``nri-cpumgr status`` in the plugin pod); then the
  Helm upgrade, rollback and uninstall of docs/operations/upgrade.md, with a Guaranteed pod
  running through all three on its CPU and the CRD left behind;
* last, the Helm release uninstalled and ``deploy/`` applied with ``kubectl apply -k``
  (tests/cluster/kustomize.py, what the 1.20.2 cluster checks): the docs' pods pinned, seen
  with crictl as a user on the node sees them (the transcript kept in tests/data/kubelet-1.37/,
  shown in the deploy docs), a rolling restart of the DaemonSet under the running pods moving
  nothing, their deletion giving the CPU back, the metrics through the API server;
* last, ``make chart``'s chart repository served on 127.0.0.1: ``helm repo add`` and ``helm
  install`` from it.

A recording NRI plugin (tests/e2e/harness/nullplugin.py ``--record``, index 10, before the
plugin) keeps every request the runtime sent while the tests ran; what the kubelet sends for
the pod-level pod is compared with tests/data/kubelet-1.37/ (``NRI_RECORD_UPDATE=1`` rewrites
those files from the run; their README says how they were made).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf.json_format import MessageToDict

from nri_cpumgr.api import nri_pb2
from tests.cluster import operator_steps
from tests.cluster.harness import (
    NODE_NAME,
    Cluster,
    ClusterError,
    modern_bin_dirs,
    nrt_cpu,
    wait_for,
    wait_rollout,
)
from tests.cluster.kustomize import (
    apply_kustomize,
    create_docs_pods,
    metrics_through_the_api_server,
    restart_keeps_and_delete_returns,
)
from tests.e2e.harness import CRIClient, cgroups, e2e_missing
from tests.e2e.harness.docs_pods import DOCS_PODS
from tests.e2e.harness.images import BUSYBOX_IMAGE
from tests.e2e.harness.paths import REPO
from tests.e2e.image import ImageBuildError, ensure_image

NS = "nri-cpumgr"
CHART = REPO / "deploy/helm/nri-cpumgr"
DATA = REPO / "tests/data/kubelet-1.37"
GATES = {"PodLevelResources": True, "PodLevelResourceManagers": True,
         "InPlacePodVerticalScalingExclusiveCPUs": True}


def _versions() -> list[str]:
    raw = os.environ.get("NRI_CLUSTER_CONTAINERD", "2.1")
    vs = [v.strip() for v in raw.split(",") if v.strip()]
    bad = [v for v in vs if v not in ("2.1", "2.4")]
    if bad:
        raise pytest.UsageError(f"NRI_CLUSTER_CONTAINERD: kubelet 1.37 runs with containerd "
                                f"2.1 or 2.4, not {bad}")
    return vs


def _fail_or_skip(msg: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(msg + " (CI is set: the cluster tests are required)", pytrace=False)
    pytest.skip(msg)


@pytest.fixture(scope="module", params=_versions(), ids=lambda v: f"containerd-{v}")
def modern(request: pytest.FixtureRequest) -> Iterator[tuple[Cluster, dict[str, Path]]]:
    """A started kubelet 1.37 cluster on containerd ``param``, with the built tool dirs."""
    version = request.param
    reasons = e2e_missing(version)
    dirs, missing = modern_bin_dirs("kubernetes", "etcd", "helm", "crictl")
    reasons += missing
    if reasons:
        _fail_or_skip(f"the kubelet 1.37 cluster cannot run here: {'; '.join(reasons)}")
    c = Cluster(dirs["kubernetes"], flavor="1.37", containerd=version,
                etcd_bin=dirs["etcd"] / "etcd")
    c.start()
    try:
        yield c, dirs
    finally:
        problems = c.stop()
        assert not problems, f"cluster cleanup: {problems}"


class Recorder:
    """The recording NRI plugin on the node's NRI socket (a process of this test)."""

    def __init__(self, c: Cluster) -> None:
        self.dir = c.work / "nri-record"
        self.dir.mkdir(exist_ok=True)
        self.log = open(c.work / "nri-record.log", "ab")  # noqa: SIM115 - for its life
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.harness.nullplugin", "--socket",
             str(c.nri_socket), "--name", "record", "--idx", "10", "--record", str(self.dir),
             # NRI v0.6.1's events, as nri-cpumgr's: no validation (see test_harness.py)
             "--events", "0x7ff"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)))
        wait_for(lambda: b"registered" in (c.work / "nri-record.log").read_bytes(), 30,
                 "the recording plugin to register")

    def requests(self, method: str) -> list[dict[str, Any]]:
        """Every recorded ``method`` request, decoded (NRI v1alpha1 schema) as JSON dicts."""
        cls = getattr(nri_pb2, f"{method}Request")
        out = []
        for f in sorted(self.dir.glob(f"*-{method}.bin")):
            msg = cls()
            msg.ParseFromString(f.read_bytes())
            out.append(MessageToDict(msg, preserving_proto_field_name=True))
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()


def helm_values(c: Cluster, **config: Any) -> dict[str, Any]:
    """The chart values for the test node. What differs from the chart's defaults, and why:
    the NRI socket and state directory are in the cluster's work dir (the test node's
    containerd is not the machine's; the test must not write /var/lib); sharedPoolGrowDelay 2s
    (a deleted pod's CPU back within the test's patience); the plugin's gates; the exporter
    and the plugin's pod watch reach the API server on 127.0.0.1 (no service network); and
    the plugin's own pod requests no CPU, so the kubelet admits a resize to the node's 2 CPUs
    and the plugin is the one that refuses it. The test containerd's CRI socket is in its work
    dir, not at /run/containerd/containerd.sock: ``containerRuntimeEndpoint`` names it and
    ``criSocket.hostDirs`` mounts its directory (as the chart mounts /run/containerd on a node),
    so the plugin takes what ``auto`` takes on a real node (``cri`` on 2.1, ``async`` on 2.4),
    not ``reply`` for want of the socket."""
    state = c.work / "plugin-state"
    state.mkdir(exist_ok=True)
    cfg = yaml.safe_load(yaml.safe_dump(_chart_defaults()["config"]))
    cfg.update(socketPath=str(c.nri_socket), stateDirectory=str(state),
               sharedPoolGrowDelay="2s", featureGates=GATES,
               apiServerURL=f"https://127.0.0.1:{c.ports['apiserver']}",
               containerRuntimeEndpoint=str(c.cri_socket), **config)
    return {
        "config": cfg,
        "criSocket": {"hostDirs": [str(c.cri_socket.parent)]},
        "namespace": {"create": True},
        "resources": {"plugin": {"requests": {"cpu": "0", "memory": "64Mi"},
                                 "limits": {"cpu": "1", "memory": "256Mi"}},
                      "nrtExporter": {"requests": {"cpu": "0", "memory": "64Mi"},
                                      "limits": {"cpu": "200m", "memory": "128Mi"}}},
        "nrtExporter": {"enabled": True, "env": [
            {"name": "KUBERNETES_SERVICE_HOST", "value": "127.0.0.1"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": str(c.ports["apiserver"])}]},
    }


def operator_context(c: Cluster, name: str, **config: Any) -> operator_steps.Context:
    """The operator pages' commands on the test node: the page's example values
    (deploy/examples/values.yaml) with the test's values over them (:func:`helm_values`: the
    test node's paths, 2 CPUs with CPU 0 reserved where the example reserves 0,1, the image
    imported as nri-cpumgr:dev where the example names a registry), written to
    ``values-<name>.yaml``; the example Guaranteed pod with the test's local busybox."""
    values = helm_values(c)
    values["config"].update(config)  # over helm_values' own (e.g. sharedPoolGrowDelay)
    values["namespace"]["create"] = False  # the page creates and labels it
    values["image"] = {"repository": "nri-cpumgr", "tag": "dev", "pullPolicy": "Never"}
    merged = operator_steps.merge(operator_steps.page_values(), values)
    f = c.work / f"values-{name}.yaml"
    f.write_text(yaml.safe_dump(merged))
    manifest = yaml.safe_load((REPO / operator_steps.POD_ARG).read_text())
    for ctr in manifest["spec"]["containers"]:
        ctr.update(image=BUSYBOX_IMAGE, imagePullPolicy="Never")
    pods = c.get_json("pods", "-n", NS)["items"] if name != "install" else []
    return operator_steps.Context(
        chart=CHART, values_file=f, pod_manifest=json.dumps(manifest),
        names={"node": NODE_NAME,
               "plugin pod": pods[0]["metadata"]["name"] if pods else "<no plugin pod>"})


def operator_commands(page: Path, section: str, subsection: str = "") -> list[str]:
    """The runnable commands of ``page``'s ``sh`` blocks under the heading ``section`` (a
    prefix) and ``subsection`` (exact, when given)."""
    cmds = [cmd for b in operator_steps.blocks(page)
            if b.section.startswith(section) and (not subsection or b.subsection == subsection)
            for cmd in b.commands if operator_steps.runnable(cmd)]
    assert cmds, f"no commands under {section!r} {subsection!r} in {page.name}"
    return cmds


def _chart_defaults() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def helm_apply(c: Cluster, helm: Path, values: dict[str, Any], verb: str = "install") -> str:
    f = c.work / f"values-{verb}.yaml"
    f.write_text(yaml.safe_dump(values))
    # (helm 4: no --wait is "hookOnly"; the test waits for the rollout itself)
    return c.helm(helm, verb, "nri-cpumgr", str(CHART), "--namespace", NS, "--values", str(f))


@pytest.fixture(scope="module")
def deployed(modern: tuple[Cluster, dict[str, Path]]) -> Iterator[tuple[Cluster, Path,
                                                                         Recorder]]:
    c, dirs = modern
    assert cgroups.host_online_cpus() == "0-1", "this scenario needs a 2-CPU host"
    try:
        archive = ensure_image()
    except ImageBuildError as e:
        _fail_or_skip(f"cannot build the nri-cpumgr image: {e}")
    c.import_image(archive)  # the page's `skopeo copy` to a registry (the test has none)
    rec = Recorder(c)
    helm = dirs["helm"] / "helm"
    # the quick start's steps 3 and 4 as the page writes them: the image, the namespace and
    # its Pod Security label, helm install with the example values, the rollout
    ctx = operator_context(c, "install")
    ran = 0
    for block in operator_steps.blocks(operator_steps.QUICK_START):
        if block.section.startswith(("3.", "4.")):
            for cmd in block.commands:
                if operator_steps.runnable(cmd):
                    operator_steps.run(c, helm, cmd, ctx, ensure_image)
                    ran += 1
    assert ran >= 5, "the quick start's install commands were not found"
    try:
        yield c, helm, rec
    finally:
        rec.stop()


# -- pods ------------------------------------------------------------------------------------
def container(name: str, cpu: str | None, mem: str = "64Mi", **extra: Any) -> dict[str, Any]:
    res = {} if cpu is None else {"requests": {"cpu": cpu, "memory": mem},
                                  "limits": {"cpu": cpu, "memory": mem}}
    return {"name": name, "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
            "command": ["sleep", "3600"], "resources": res, **extra}


def pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"terminationGracePeriodSeconds": 0, "enableServiceLinks": False,
                     "automountServiceAccountToken": False, "containers": containers, **spec}}


def create(c: Cluster, manifest: dict[str, Any]) -> None:
    c.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def delete(c: Cluster, *names: str) -> None:
    for n in names:
        c.kubectl("delete", "pod", n, "-n", "default", "--wait=true", "--ignore-not-found",
                  timeout=120)


def statuses(c: Cluster, pod_name: str) -> dict[str, dict[str, Any]]:
    st = c.get_json("pod", pod_name, "-n", "default")["status"]
    return {s["name"]: s for s in (st.get("containerStatuses") or [])
            + (st.get("initContainerStatuses") or [])}


def running_id(c: Cluster, pod_name: str, ctr: str) -> str:
    s = statuses(c, pod_name).get(ctr, {})
    if not s.get("state", {}).get("running"):
        return ""
    return str(s["containerID"]).split("://", 1)[1]


def wait_running(c: Cluster, pod_name: str, ctr: str, timeout: float = 120) -> str:
    return wait_for(lambda: running_id(c, pod_name, ctr), timeout, f"{pod_name}/{ctr} running",
                    on_timeout=lambda: c.kubectl("describe", "pod", pod_name, "-n", "default",
                                                 check=False)[-3000:])


def seen(cri: CRIClient, cid: str) -> tuple[str, str, str]:
    return cri.spec_cpus(cid), cri.cgroup_cpus(cid), cri.proc_cpus(cid)


def expect_cpus(cri: CRIClient, cid: str, want: str, what: str) -> None:
    wait_for(lambda: seen(cri, cid) == (want,) * 3, 30, f"{what} on CPU {want}",
             on_timeout=lambda: str(seen(cri, cid)))




def plugin_log(c: Cluster) -> str:
    return c.kubectl("logs", "-n", NS, "ds/nri-cpumgr", "-c", "nri-cpumgr", "--tail=400",
                     check=False)


# -- tests -----------------------------------------------------------------------------------
def test_helm_install_rolls_out_and_the_plugin_registers(deployed) -> None:
    c, _, _ = deployed
    ds = c.get_json("daemonset", "nri-cpumgr", "-n", NS)
    assert ds["status"]["numberReady"] == 1 and ds["status"]["desiredNumberScheduled"] == 1
    assert ds["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    log = plugin_log(c)
    assert "registered" in log
    # the runtime's name and version as the plugin learned them at Configure
    want = {"2.1": "v2.1.", "2.4": "v2.4.2"}[c.containerd]
    line = next(x for x in log.splitlines() if "configure runtime=" in x)
    assert "containerd" in line and want.lstrip("v") in line, line
    # the shared-pool update mode auto picks for it (nri_cpumgr/poolsync/runtimes.py): the CRI
    # socket where the NRI lock-order inversion is (2.1), async where it is fixed (2.4)
    want_mode = {"2.1": f"cri on {c.cri_socket} (auto: ", "2.4": "async (auto: "}[c.containerd]
    assert f"shared pool update mode {want_mode}" in log, log[-3000:]
    v = c.kubectl("version", "-o", "json")
    assert json.loads(v)["serverVersion"]["gitVersion"] == "v1.37.2"
    node = c.get_json("node", NODE_NAME)["status"]["nodeInfo"]
    assert node["kubeletVersion"] == "v1.37.2"
    assert node["containerRuntimeVersion"].startswith("containerd://")


def test_quick_start_check_commands(deployed) -> None:
    """The quick start's step 5, its commands as written: the log lines it greps for, the
    example Guaranteed pod on the one CPU not reserved (CPU 1), ``nri-cpumgr status`` in the
    plugin pod of the node listing it, the example pod deleted."""
    c, helm, _ = deployed
    ctx = operator_context(c, "check")
    outs = [(cmd, operator_steps.run(c, helm, cmd, ctx, ensure_image))
            for cmd in operator_commands(operator_steps.QUICK_START, "5.")]

    def out_of(part: str) -> str:
        return next(out for cmd, out in outs if part in cmd)

    log = out_of("logs ds/nri-cpumgr")
    assert "registered" in log and "shared pool update mode" in log, log
    assert out_of("Cpus_allowed_list").split() == ["Cpus_allowed_list:", "1"]
    assert ctx.names["plugin pod"] in out_of("--field-selector")
    status = out_of("nri-cpumgr status")
    row = next((ln for ln in status.splitlines() if "guaranteed-1cpu" in ln), "")
    # POD CONTAINER QOS CPUS MEMS NUMA EXCLUSIVE STATE
    assert row.split()[2:4] == ["Guaranteed", "1"] and "yes" in row.split(), status
    # the page's last command deleted the example pod
    assert c.kubectl("get", "pod", "guaranteed-1cpu", "--ignore-not-found") == ""


def test_docs_pods_pinned_and_nrt_follows(deployed) -> None:
    c, _, _ = deployed
    cri = CRIClient(c.cri_socket)
    pods = {n: (req, lim) for n, _, req, lim in DOCS_PODS
            if n in ("besteffort", "burstable-cpu", "guaranteed-1cpu")}
    want = {"besteffort": "0", "burstable-cpu": "0", "guaranteed-1cpu": "1"}
    ids: dict[str, str] = {}
    # the shared pods first, running before the Guaranteed one (tests/cluster/kustomize.py
    # SHARED_FIRST: the start race that loses a shrink)
    for group in ([n for n in pods if want[n] == "0"], [n for n in pods if want[n] != "0"]):
        for name in group:
            req, lim = pods[name]
            res = {k: v for k, v in (("requests", req), ("limits", lim)) if v}
            create(c, pod(name, [{**container("app", None), "resources": res}]))
        ids.update({n: wait_running(c, n, "app") for n in group})
    for name, cid in ids.items():
        expect_cpus(cri, cid, want[name], name)
    out = c.kubectl("exec", "guaranteed-1cpu", "-n", "default", "--", "grep",
                    "Cpus_allowed_list", "/proc/self/status")
    assert out.split() == ["Cpus_allowed_list:", "1"]
    wait_for(lambda: nrt_cpu(c) == {"node-0": "0"}, 30, "NRT available cpu 0",
             on_timeout=lambda: str(nrt_cpu(c)))
    delete(c, *pods)
    wait_for(lambda: nrt_cpu(c) == {"node-0": "1"}, 60, "NRT available cpu back to 1",
             on_timeout=lambda: str(nrt_cpu(c)))
    cri.close()


def test_sidecar_and_init_container_reuse(deployed) -> None:
    c, _, _ = deployed
    cri = CRIClient(c.cri_socket)
    # a restartable init container (sidecar) with a whole CPU, the app with half of one:
    # Guaranteed pod, the sidecar exclusive on CPU 1, the app on the shared CPU 0
    side = container("sidecar", "1", restartPolicy="Always")
    create(c, pod("sidecar", [container("app", "500m")], initContainers=[side]))
    sid, app = wait_running(c, "sidecar", "sidecar"), wait_running(c, "sidecar", "app")
    expect_cpus(cri, sid, "1", "the sidecar")
    expect_cpus(cri, app, "0", "the app beside the sidecar")
    delete(c, "sidecar")
    # an init container with a whole CPU that finishes: the app container reuses its CPU
    init = container("init", "1", command=["sh", "-c", "grep Cpus_allowed_list /proc/self/status"])
    create(c, pod("init-reuse", [container("app", "1")], initContainers=[init]))
    app = wait_running(c, "init-reuse", "app")
    expect_cpus(cri, app, "1", "the app after its init container")
    logs = c.kubectl("logs", "init-reuse", "-n", "default", "-c", "init")
    assert logs.split() == ["Cpus_allowed_list:", "1"]
    delete(c, "init-reuse")
    cri.close()


def _resize(c: Cluster, pod_name: str, ctr: str, cpu: str, mem: str) -> None:
    patch = {"spec": {"containers": [{"name": ctr, "resources": {
        "requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}}]}}
    c.kubectl("patch", "pod", pod_name, "-n", "default", "--subresource", "resize",
              "--type", "strategic", "-p", json.dumps(patch))


def _resize_condition(c: Cluster, pod_name: str) -> dict[str, Any] | None:
    conds = c.get_json("pod", pod_name, "-n", "default")["status"].get("conditions", [])
    return next((x for x in conds if x["type"] == "PodResizeInProgress"), None)


def test_in_place_resize_reaches_the_plugin_and_a_refused_one_shows(deployed) -> None:
    c, _, rec = deployed
    cri = CRIClient(c.cri_socket)
    create(c, pod("resize", [container("app", "1", resizePolicy=[
        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
        {"resourceName": "memory", "restartPolicy": "NotRequired"}])]))
    cid = wait_running(c, "resize", "app")
    expect_cpus(cri, cid, "1", "the resize pod")
    n_updates = len(rec.requests("UpdateContainer"))
    # a memory resize: the kubelet's UpdateContainerResources reaches the plugin as an NRI
    # UpdateContainer with the new limit; the container keeps its exclusive CPU
    _resize(c, "resize", "app", "1", "96Mi")

    def updated() -> list[dict[str, Any]]:
        return [r for r in rec.requests("UpdateContainer")[n_updates:]
                if r["container"]["id"] == cid
                and r.get("linux_resources", {}).get("memory", {}).get("limit", {})
                .get("value") == str(96 * 2**20)]

    wait_for(updated, 60, "an NRI UpdateContainer with the new memory limit",
             on_timeout=lambda: c.kubectl("describe", "pod", "resize", check=False)[-2000:])
    wait_for(lambda: (statuses(c, "resize")["app"].get("resources", {})
                      .get("limits", {}).get("memory") == "96Mi"), 60,
             "the pod status to show the resized memory")
    assert seen(cri, cid) == ("1",) * 3
    # a CPU grow the node cannot give (CPU 0 is reserved): the kubelet admits it, the plugin
    # refuses the UpdateContainer with the kubelet's reason, nothing of it is applied
    _resize(c, "resize", "app", "2", "96Mi")

    def refused() -> dict[str, Any] | None:
        cond = _resize_condition(c, "resize")
        return cond if cond and "NotEnoughCPUs" in cond.get("message", "") else None

    cond = wait_for(refused, 90, "PodResizeInProgress with the plugin's refusal",
                    on_timeout=lambda: json.dumps(c.get_json("pod", "resize", "-n", "default")
                                                  ["status"], indent=1)[-3000:]
                    + plugin_log(c)[-2000:])
    assert cond["reason"] == "Error", cond
    assert "resize pod=default/resize container=app refused" in plugin_log(c)
    assert seen(cri, cid) == ("1",) * 3
    delete(c, "resize")
    cri.close()


def test_refusal_visible_in_kubectl_describe(deployed) -> None:
    c, _, _ = deployed
    # two Guaranteed 1-CPU pods fit the scheduler's 2 CPUs, not the one exclusive CPU
    create(c, pod("first", [container("app", "1")]))
    wait_running(c, "first", "app")
    create(c, pod("second", [container("app", "1")]))

    def described() -> str:
        out = c.kubectl("describe", "pod", "second", "-n", "default")
        # the kubelet's text for an allocation error without an admission type (the plugin
        # gives it when it admits the pod whole): UnexpectedAdmissionError: Allocate failed
        # due to not enough cpus available ...
        return out if "UnexpectedAdmissionError" in out or "NotEnoughCPUs" in out else ""

    out = wait_for(described, 90, "the refusal in kubectl describe pod",
                   on_timeout=lambda: c.kubectl("describe", "pod", "second", check=False))
    assert "CreateContainerError" in out or "Failed" in out, out
    delete(c, "first", "second")


def test_helm_upgrade_rolls_and_pod_level_pod_runs_on_its_bubble(deployed) -> None:
    c, helm, rec = deployed
    cri = CRIClient(c.cri_socket)
    before = c.get_json("daemonset", "nri-cpumgr", "-n", NS)["spec"]["template"]
    # the kubelet ignores the scope under topologyManagerPolicy none (the plugin follows it)
    values = helm_values(c, topologyManagerScope="pod",
                         topologyManagerPolicy="best-effort")
    values["namespace"]["create"] = False
    helm_apply(c, helm, values, verb="upgrade")
    after = c.get_json("daemonset", "nri-cpumgr", "-n", NS)["spec"]["template"]
    assert (after["metadata"]["annotations"]["checksum/config"]
            != before["metadata"]["annotations"]["checksum/config"])
    wait_rollout(c, NS, "nri-cpumgr")
    ds = c.get_json("daemonset", "nri-cpumgr", "-n", NS)
    assert ds["status"]["updatedNumberScheduled"] == 1 and ds["metadata"]["generation"] >= 2
    cm = yaml.safe_load(c.get_json("configmap", "nri-cpumgr-config", "-n", NS)
                        ["data"]["config.yaml"])
    assert cm["topologyManagerScope"] == "pod"
    # a pod with .spec.resources (PodLevelResources) and two containers without resources
    n_create = len(rec.requests("CreateContainer"))
    budget = {"requests": {"cpu": "1", "memory": "128Mi"},
              "limits": {"cpu": "1", "memory": "128Mi"}}
    create(c, pod("pod-level", [container("app", None), container("helper", None)],
                  resources=budget))
    app = wait_running(c, "pod-level", "app")
    expect_cpus(cri, app, "1", "pod-level app (the pod's bubble)")
    wait_for(lambda: nrt_cpu(c) == {"node-0": "0"}, 30, "NRT: the bubble's CPU taken",
             on_timeout=lambda: str(nrt_cpu(c)))
    recorded = wait_for(lambda: [r for r in rec.requests("CreateContainer")[n_create:]
                                 if r["pod"]["name"] == "pod-level"
                                 and r["container"]["name"] in ("app", "helper")], 30,
                        "the recorded CreateContainer requests")
    check_recording(c, recorded)
    cri.close()


def test_pod_level_pod_second_container_shares_the_bubble(deployed) -> None:
    """kubelet 1.37 gives a container without resources in a pod-level pod the pod's limits
    and request (tests/data/kubelet-1.37): from NRI alone the plugin took the first one for a
    Guaranteed 1-CPU container and refused the second; with the pod spec from its watch
    (podSpecSource apiServer, issue 26) both run on the pod's shared pool."""
    c, _, _ = deployed
    cri = CRIClient(c.cri_socket)
    try:
        helper = wait_running(c, "pod-level", "helper", timeout=30)
        expect_cpus(cri, helper, "1", "pod-level helper (the pod's bubble, beside the app)")
        app = wait_running(c, "pod-level", "app")
        assert seen(cri, app) == ("1",) * 3
    finally:
        cri.close()
        delete(c, "pod-level")
        wait_for(lambda: nrt_cpu(c) == {"node-0": "1"}, 60, "NRT: the bubble's CPU back",
                 on_timeout=lambda: str(nrt_cpu(c)))


def test_upgrade_rollback_uninstall_as_the_page_says(deployed) -> None:
    """docs/operations/upgrade.md's Helm sections, their commands as written, with the
    example Guaranteed pod running through them: the upgrade (a configuration change here,
    where an operator would also change the image tag) rolls the DaemonSet and the ConfigMap
    has the new value; the rollback brings the previous ConfigMap back; the uninstall removes
    the DaemonSet and leaves the CRD (the page's ``kubectl get crd`` succeeds); the pod keeps
    its exclusive CPU through all three (what the page says running pods see)."""
    c, helm, _ = deployed
    cri = CRIClient(c.cri_socket)
    page = operator_steps.UPGRADE
    pod_ctx = operator_context(c, "pod")
    operator_steps.run(c, helm, "kubectl apply -f deploy/examples/guaranteed-pod.yaml",
                       pod_ctx, ensure_image)
    cid = wait_running(c, "guaranteed-1cpu", "app")
    expect_cpus(cri, cid, "1", "the example Guaranteed pod")

    def config() -> dict[str, Any]:
        return yaml.safe_load(c.get_json("configmap", "nri-cpumgr-config", "-n", NS)
                              ["data"]["config.yaml"])

    before = config()
    gen = c.get_json("daemonset", "nri-cpumgr", "-n", NS)["metadata"]["generation"]
    up = operator_context(c, "upgrade", sharedPoolGrowDelay="3s")
    outs = [operator_steps.run(c, helm, cmd, up, ensure_image) for cmd in
            operator_commands(page, "With Helm", "Upgrade, or change the configuration")]
    assert config()["sharedPoolGrowDelay"] == "3s"
    assert c.get_json("daemonset", "nri-cpumgr", "-n", NS)["metadata"]["generation"] > gen
    history = outs[-1]  # helm history: the upgrade is the deployed revision
    assert "superseded" in history and "deployed" in history, history
    assert seen(cri, cid) == ("1",) * 3
    for cmd in operator_commands(page, "With Helm", "Roll back"):
        operator_steps.run(c, helm, cmd, up, ensure_image)
    assert config() == before
    assert seen(cri, cid) == ("1",) * 3
    for cmd in operator_commands(page, "With Helm", "Uninstall"):
        operator_steps.run(c, helm, cmd, up, ensure_image)  # kubectl get crd: still there
    wait_for(lambda: not c.get_json("pods", "-n", NS)["items"], 120,
             "the Helm release's pods gone")
    assert c.kubectl("get", "daemonset", "-n", NS, "--ignore-not-found") == ""
    assert seen(cri, cid) == ("1",) * 3  # no plugin now: the running pod keeps its CPU
    delete(c, "guaranteed-1cpu")
    cri.close()


def test_kustomize_apply_restart_under_pods_and_crictl(deployed) -> None:
    """The Helm release replaced by ``kubectl apply -k`` of deploy/ (tests/cluster/kustomize.py,
    the 1.20.2 cluster's checks): the docs' pods pinned, as crictl shows them on the node; a
    rolling restart under them moves nothing; deleting them gives the CPU back; the metrics
    through the API server."""
    c, helm, _ = deployed
    # the release is gone already when the upgrade page's test ran (its last step)
    if "nri-cpumgr" in c.helm(helm, "list", "--namespace", NS, "-q").split():
        c.helm(helm, "uninstall", "nri-cpumgr", "--namespace", NS)
    wait_for(lambda: not c.get_json("pods", "-n", NS)["items"], 120,
             "the Helm release's pods gone")
    # the plugin's pod watch reaches the API server on 127.0.0.1 (no service network)
    apply_kustomize(c, {"apiServerURL": f"https://127.0.0.1:{c.ports['apiserver']}"})
    ds = c.get_json("daemonset", "nri-cpumgr", "-n", NS)
    assert "app.kubernetes.io/managed-by" not in ds["metadata"].get("labels", {})
    assert ds["status"]["numberReady"] == 1
    cri = CRIClient(c.cri_socket)
    ids = create_docs_pods(c, cri)
    crictl_transcript(c, ids)
    restart_keeps_and_delete_returns(c, cri, ids)
    metrics_through_the_api_server(c)
    cri.close()


def test_install_from_the_chart_repository(deployed) -> None:
    """``make chart``'s repository (scripts/chart.sh: helm package + helm repo index) served
    over HTTP on 127.0.0.1 in the cluster's network namespace (where helm runs): after the
    kustomize deployment is deleted, ``helm repo add`` and ``helm install`` from it; the
    DaemonSet of the packaged chart rolls out and the plugin registers."""
    c, helm, _ = deployed
    charts = c.work / "charts"
    r = subprocess.run(["bash", str(REPO / "scripts/chart.sh")], capture_output=True,
                       text=True, timeout=300, cwd=REPO,
                       env=dict(os.environ, HELM=str(helm), OUT=str(charts)))
    assert r.returncode == 0, r.stdout + r.stderr
    c.kubectl("delete", "-k", str(c.work / "overlay"), "--wait=true", timeout=300)
    port = 18879
    assert port not in c.ports.values()
    assert c.proc is not None
    log = open(c.work / "chart-server.log", "ab")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        ["nsenter", f"--net=/proc/{c.proc.pid}/ns/net", "--", sys.executable, "-m",
         "http.server", "--bind", "127.0.0.1", "--directory", str(charts), str(port)],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        def added() -> bool:
            try:
                c.helm(helm, "repo", "add", "local", f"http://127.0.0.1:{port}/")
            except ClusterError:
                return False
            return True

        wait_for(added, 30, "helm repo add of the chart repository",
                 on_timeout=lambda: (c.work / "chart-server.log").read_text()[-2000:])
        assert "local/nri-cpumgr" in c.helm(helm, "search", "repo", "nri-cpumgr")
        c.kubectl("create", "namespace", NS)
        c.kubectl("label", "namespace", NS, "pod-security.kubernetes.io/enforce=privileged")
        ctx = operator_context(c, "repo")
        c.helm(helm, "install", "nri-cpumgr", "local/nri-cpumgr", "--namespace", NS,
               "--values", str(ctx.values_file))
        wait_rollout(c, NS, "nri-cpumgr")
        ds = c.get_json("daemonset", "nri-cpumgr", "-n", NS)
        version = yaml.safe_load((CHART / "Chart.yaml").read_text())["version"]
        assert ds["metadata"]["labels"]["helm.sh/chart"] == f"nri-cpumgr-{version}"
        wait_for(lambda: "registered" in plugin_log(c), 60, "the plugin registered")
        c.helm(helm, "uninstall", "nri-cpumgr", "--namespace", NS)
    finally:
        server.terminate()
        server.wait(10)
        log.close()



def test_node_preparation_init_container(deployed) -> None:
    """The chart's opt-in ``nodePreparation`` (its ``enable-nri`` init container, privileged in
    the host's PID namespace) on the test node, after the chart repository's uninstall:

    1. ``dryRun`` over a copy of the node's containerd config with NRI turned off: the init
       container's log shows the diff that turns it on and says nothing was changed; the file
       is byte for byte as it was; the plugin starts after it and registers.
    2. not a dry run, over a copy of the config the node runs (NRI on): "nothing to do", the
       file unchanged, the runtime not restarted (the node's containerd keeps its pid).

    Not run here: the edit and restart for real. The restart enters the host's PID 1
    (``systemctl restart containerd``) and the test node's containerd is not a systemd unit;
    the edit itself is unit-tested (tests/unit/test_nodeprep.py)."""
    c, helm, _ = deployed
    node_cfg = c.work / "node" / "config.toml"
    text = node_cfg.read_text()
    on_nri = '[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n'
    assert on_nri in text, "the node's containerd config changed shape"
    off, on = c.work / "nodeprep-off" / "config.toml", c.work / "nodeprep-on" / "config.toml"
    off.parent.mkdir(exist_ok=True)
    on.parent.mkdir(exist_ok=True)
    off_text = text.replace(on_nri, on_nri.replace("disable = false", "disable = true"))
    off.write_text(off_text)
    on.write_text(text)
    ctrd_pid = subprocess.run(["pgrep", "-f", f"containerd --config {node_cfg}"],
                              capture_output=True, text=True).stdout.split()
    assert len(ctrd_pid) == 1, ctrd_pid

    def init_log(dry: bool, path: Path, verb: str) -> str:
        values = helm_values(c)
        values["namespace"]["create"] = False
        values["image"] = {"repository": "nri-cpumgr", "tag": "dev", "pullPolicy": "Never"}
        values["nodePreparation"] = {"enabled": True, "runtime": "containerd",
                                     "config": str(path), "dryRun": dry}
        helm_apply(c, helm, values, verb=verb)
        wait_rollout(c, NS, "nri-cpumgr")
        return c.kubectl("logs", "-n", NS, "ds/nri-cpumgr", "-c", "enable-nri")

    if "nri-cpumgr" in c.helm(helm, "list", "--namespace", NS, "-q").split():
        c.helm(helm, "uninstall", "nri-cpumgr", "--namespace", NS)
    log = init_log(True, off, "install")
    assert "-  disable = true" in log and "+  disable = false" in log, log
    assert f"dry run: /host{off} not changed, containerd not restarted" in log, log
    assert off.read_text() == off_text
    wait_for(lambda: "registered" in plugin_log(c), 60, "the plugin registered")
    log = init_log(False, on, "upgrade")
    assert f"NRI is on in /host{on}: nothing to do" in log, log
    assert on.read_text() == text
    assert subprocess.run(["pgrep", "-f", f"containerd --config {node_cfg}"],
                          capture_output=True, text=True).stdout.split() == ctrd_pid
    c.helm(helm, "uninstall", "nri-cpumgr", "--namespace", NS)


CRICTL_CHECKS = [
    ["ps", "--name", "app"],
    ["inspect", "-o", "go-template", "--template",
     "{{.info.runtimeSpec.linux.resources.cpu.cpus}}", "{guaranteed-1cpu}"],
    ["exec", "{guaranteed-1cpu}", "grep", "Cpus_allowed_list", "/proc/self/status"],
    ["inspect", "-o", "go-template", "--template",
     "{{.info.runtimeSpec.linux.resources.cpu.cpus}}", "{besteffort}"],
]
"""The deploy page's crictl steps ({pod} stands for that pod's container id, as crictl ps
prints it: the first 13 characters)."""


def crictl_transcript(c: Cluster, ids: dict[str, str]) -> str:
    """Run :data:`CRICTL_CHECKS` with the node's crictl configured as a node's is
    (``runtime-endpoint`` in its config file), in the cluster's network namespace (``exec``
    streams from containerd's loopback server); check what each prints and return the
    transcript, ``$ command`` lines and their output. Written to the work dir; with
    ``NRI_RECORD_UPDATE=1`` to tests/data/kubelet-1.37/crictl-containerd-<version>.txt (the
    docs include the 2.4 one); otherwise the kept file must have the same commands."""
    crictl = modern_bin_dirs("crictl")[0]["crictl"] / "crictl"
    conf = c.work / "crictl.yaml"
    conf.write_text(f"runtime-endpoint: unix://{c.cri_socket}\ntimeout: 10\n")
    short = {n: cid[:13] for n, cid in ids.items()}
    lines, outs = [], []
    for args in CRICTL_CHECKS:
        argv = [a.format(**short) if a.startswith("{") and a.strip("{}") in short else a
                for a in args]
        out = c.run_in_net([str(crictl), *argv], env={"CRI_CONFIG_FILE": str(conf)},
                           timeout=60)
        outs.append(out)
        shown = " ".join(f"'{a}'" if "{{" in a else a for a in argv)
        lines += [f"$ crictl {shown}", *out.rstrip("\n").splitlines()]
    rows = [ln for ln in outs[0].splitlines()[1:] if ln.strip()]
    assert len(rows) == len(ids), outs[0]
    for name, cid in short.items():  # CONTAINER ... STATE NAME ATTEMPT POD ID POD NAMESPACE
        assert any(ln.startswith(cid) and f" {name} " in ln and " Running " in ln
                   for ln in rows), (name, outs[0])
    assert outs[1].strip() == "1" and outs[3].strip() == "0", outs
    assert outs[2].split() == ["Cpus_allowed_list:", "1"], outs[2]
    text = "\n".join(lines) + "\n"
    name = f"crictl-containerd-{c.containerd}.txt"
    (c.work / name).write_text(text)
    print(text)
    if os.environ.get("NRI_RECORD_UPDATE") == "1":
        (DATA / name).write_text(text)
    elif (DATA / name).is_file():
        def commands(t: str) -> list[str]:
            return [re.sub(r"\b[0-9a-f]{13}\b", "ID", ln) for ln in t.splitlines()
                    if ln.startswith("$ ")]

        assert commands(text) == commands((DATA / name).read_text())
    return text


# -- the recording ---------------------------------------------------------------------------
VOLATILE = ("id", "pod_sandbox_id", "uid", "pid", "created_at", "started_at", "finished_at",
            "net_ns", "ips")


def scrub(x: Any) -> Any:
    """A recorded request without what differs between runs (ids, uids, pids, times, paths
    of the work dir and the pod's cgroup parent's uid)."""
    if isinstance(x, dict):
        return {k: scrub(v) for k, v in sorted(x.items())
                if k not in VOLATILE and k not in ("annotations", "labels", "mounts", "env",
                                                   "hooks", "namespaces", "args",
                                                   "cgroups_path", "cgroup_parent",
                                                   "rlimits", "oom_score_adj", "devices")}
    if isinstance(x, list):
        return [scrub(v) for v in x]
    return x


def check_recording(c: Cluster, recorded: list[dict[str, Any]]) -> None:
    """The pod-level pod's NRI CreateContainer requests, as kubelet 1.37 + containerd made
    them: compared (scrubbed) with tests/data/kubelet-1.37/, or written there with
    NRI_RECORD_UPDATE=1."""
    DATA.mkdir(parents=True, exist_ok=True)
    name = f"pod-level-create-containerd-{c.containerd}.json"
    ours: dict[str, Any] = {}
    for r in recorded:  # the first of each (the kubelet retries a refused container)
        ours.setdefault(r["container"]["name"], {"pod": r["pod"], "container": r["container"]})
    raw = c.work / name
    raw.write_text(json.dumps(ours, indent=1, sort_keys=True))
    if os.environ.get("NRI_RECORD_UPDATE") == "1":
        (DATA / name).write_text(json.dumps(ours, indent=1, sort_keys=True) + "\n")
    path = DATA / name
    if not path.is_file():
        raise ClusterError(f"no recording {path} yet: run with NRI_RECORD_UPDATE=1 "
                           f"(this run's is {raw})")
    kept = json.loads(path.read_text())
    assert scrub(ours) == scrub(kept)
    # what the recording shows, spelled out: the pod's budget reaches the plugin as
    # pod_resources, and each container without resources of its own carries the pod's:
    # shares of the pod's request, quota of its limit, its memory limit
    for r in ours.values():
        pr = r["pod"]["linux"]["pod_resources"]
        assert pr["cpu"]["shares"]["value"] == "1024", pr
        assert pr["cpu"]["quota"]["value"] == "100000", pr
        assert pr["memory"]["limit"]["value"] == str(128 * 2**20)
        cres = r["container"]["linux"]["resources"]
        assert cres["cpu"]["shares"]["value"] == "1024", cres
        assert cres["cpu"]["quota"]["value"] == "100000", cres
        assert cres["memory"]["limit"]["value"] == str(128 * 2**20), cres
