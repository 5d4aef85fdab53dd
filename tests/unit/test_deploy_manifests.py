"""deploy/: every manifest is valid Kubernetes (offline JSON schemas from kubernetes-validate,
strict: unknown fields are errors), the kustomization lists them all, and the DaemonSet is
what the project documents (not privileged, no capabilities, probes on the metrics port, the
mounts the plugin needs, a ConfigMap the plugin accepts, a quota that admits
system-node-critical), and the per-node-group overlay renders to a second DaemonSet that never
shares a node with the base one."""

from __future__ import annotations

import copy
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv

from nri_cpumgr.config import parse_config
from nri_cpumgr.metrics import parse_address

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BASE = DEPLOY / "base"
OVERLAY = DEPLOY / "overlays" / "big-nodes"
# oldest Kubernetes release NRI-enabled runtimes are used with (containerd 1.7) and the newest
# schema the validator ships
K8S_VERSIONS = ("1.26", kv.latest_version())
MANIFESTS = sorted(p for p in BASE.glob("*.yaml") if p.name != "kustomization.yaml")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all() -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for p in MANIFESTS for d in _docs(p)}


def _daemonset() -> dict[str, Any]:
    return _all()["DaemonSet/nri-cpumgr"]


def _containers() -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in _daemonset()["spec"]["template"]["spec"]["containers"]}


def _container() -> dict[str, Any]:
    """The plugin's container."""
    return _containers()["nri-cpumgr"]


CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition"}


def _plugin_config():
    cm = _all()["ConfigMap/nri-cpumgr-config"]
    return parse_config(cm["data"]["config.yaml"], "deploy/base/configmap.yaml")


def test_the_expected_manifests_exist():
    assert set(_all()) == {"Namespace/nri-cpumgr", "ServiceAccount/nri-cpumgr",
                           "ResourceQuota/nri-cpumgr-critical-pods",
                           "ConfigMap/nri-cpumgr-config", "DaemonSet/nri-cpumgr",
                           "ClusterRole/nri-cpumgr-nrt-exporter",
                           "ClusterRoleBinding/nri-cpumgr-nrt-exporter",
                           "ClusterRole/nri-cpumgr-pod-reader",
                           "ClusterRoleBinding/nri-cpumgr-pod-reader"}


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid_kubernetes(path: Path, version: str):
    docs = _docs(path)
    assert docs, f"{path.name} is empty"
    for doc in docs:
        assert kv.validate(doc, version, strict=True) == kv.major_minor(version)


def test_the_validator_rejects_what_it_should():
    # the schema check is real: a misspelled field and a wrong type both fail
    ds = copy.deepcopy(_daemonset())
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privilegd"] = False
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, K8S_VERSIONS[0], strict=True)
    ds = copy.deepcopy(_daemonset())
    ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9109"
    with pytest.raises(kv.ValidationError):
        kv.validate(ds, K8S_VERSIONS[0], strict=True)


def test_kustomization_lists_every_manifest():
    top = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert top["resources"] == ["crd", "base"]  # kubectl apply -k deploy/ = NRT CRD + base
    k = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    assert k["kind"] == "Kustomization"
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert sorted(k["resources"]) == [p.name for p in MANIFESTS]
    assert k["namespace"] == "nri-cpumgr"
    for doc in _all().values():
        if doc["kind"] in CLUSTER_SCOPED - {"Namespace"}:
            assert "namespace" not in doc["metadata"], doc["kind"]
            continue
        ns = doc["metadata"]["name"] if doc["kind"] == "Namespace" else doc["metadata"]["namespace"]
        assert ns == k["namespace"], doc["kind"]
    # the image override names the image the DaemonSet uses
    assert _container()["image"].split(":")[0] in {i["name"] for i in k["images"]}


@pytest.mark.parametrize("name", ["nri-cpumgr", "nrt-exporter"])
def test_container_is_locked_down(name: str):
    spec = _daemonset()["spec"]["template"]["spec"]
    sc = _containers()[name]["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert not sc["capabilities"].get("add")
    assert spec["automountServiceAccountToken"] is False
    for key in ("hostPID", "hostIPC"):
        assert not spec.get(key), key


def test_node_agent_scheduling():
    spec = _daemonset()["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert {"operator": "Exists"} in spec["tolerations"]  # every taint
    for c in _containers().values():
        res = c["resources"]
        assert set(res) == {"requests", "limits"}
        # Burstable (requests < limits): the plugin must not take exclusive CPUs itself
        assert res["requests"]["cpu"] != res["limits"]["cpu"], c["name"]


def test_probes_point_at_the_configured_metrics_port():
    cfg = _plugin_config()
    assert cfg.metricsAddress
    _, port = parse_address(cfg.metricsAddress)
    c = _container()
    (p,) = [p for p in c["ports"] if p["name"] == c["readinessProbe"]["httpGet"]["port"]]
    assert p["containerPort"] == port
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["livenessProbe"]["httpGet"]["port"] == p["name"]
    ann = _daemonset()["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/port"] == str(port)


def test_mounts_match_the_config():
    cfg = _plugin_config()
    c = _container()
    spec = _daemonset()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}

    def host_path(mount_path: str) -> str:
        return volumes[mounts[mount_path]["name"]]["hostPath"]["path"]

    sock_dir = str(Path(cfg.socketPath).parent)
    assert host_path(sock_dir) == "/var/run/nri"
    assert host_path(cfg.stateDirectory) == "/var/lib/nri-cpumgr"
    assert not mounts[cfg.stateDirectory].get("readOnly")
    # the node's /sys, read-only, where --sysfs-root points
    args = c["args"]
    root = args[args.index("--sysfs-root") + 1]
    assert host_path(f"{root}/sys") == "/sys" and mounts[f"{root}/sys"]["readOnly"] is True
    cfg_path = Path(args[args.index("--config") + 1])
    assert volumes[mounts[str(cfg_path.parent)]["name"]]["configMap"]["name"] == \
        "nri-cpumgr-config"
    assert cfg_path.name in _all()["ConfigMap/nri-cpumgr-config"]["data"]


def test_nrt_exporter_reads_what_the_plugin_writes_and_the_plugin_only_reads_pods():
    plugin, exp = _container(), _containers()["nrt-exporter"]
    spec = _daemonset()["spec"]["template"]["spec"]
    assert exp["image"] == plugin["image"] and exp["command"] == ["nri-cpumgr", "nrt-export"]

    def arg(c: dict[str, Any], flag: str) -> str:
        a = c["args"]
        return a[a.index(flag) + 1]

    assert arg(exp, "--config") == arg(plugin, "--config")
    assert arg(exp, "--sysfs-root") == arg(plugin, "--sysfs-root")
    (env,) = exp["env"]
    assert env == {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    by_path = {m["mountPath"]: m for m in exp["volumeMounts"]}
    assert all(m.get("readOnly") is True for m in exp["volumeMounts"])  # it writes nothing
    pm = {m["mountPath"]: m["name"] for m in plugin["volumeMounts"]}
    cfg = _plugin_config()
    assert by_path[cfg.stateDirectory]["name"] == pm[cfg.stateDirectory]
    token_dir = "/var/run/secrets/kubernetes.io/serviceaccount"
    # the plugin's API access: its node's pods, read-only (podSpecSource apiServer)
    assert pm[token_dir] == by_path[token_dir]["name"]
    assert {m["mountPath"]: m for m in plugin["volumeMounts"]}[token_dir]["readOnly"] is True
    assert cfg.podSpecSource == "apiServer"
    assert plugin["env"] == [env]
    assert _all()["ClusterRole/nri-cpumgr-pod-reader"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    vol = {v["name"]: v for v in spec["volumes"]}[by_path[token_dir]["name"]]
    kinds = [next(iter(s)) for s in vol["projected"]["sources"]]
    assert kinds == ["serviceAccountToken", "configMap", "downwardAPI"]
    docs = _all()
    role = docs["ClusterRole/nri-cpumgr-nrt-exporter"]
    assert role["rules"] == [{"apiGroups": ["topology.node.k8s.io"],
                              "resources": ["noderesourcetopologies"],
                              "verbs": ["get", "create", "update"]}]
    binding = docs["ClusterRoleBinding/nri-cpumgr-nrt-exporter"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"],
                                    "namespace": "nri-cpumgr"}]


def test_nrt_crd_is_valid_and_names_what_the_exporter_writes():
    from nri_cpumgr.nrt import model

    (crd,) = _docs(DEPLOY / "crd/noderesourcetopologies.yaml")
    assert kv.validate(crd, K8S_VERSIONS[-1], strict=True)
    assert crd["spec"]["group"] == model.GROUP and crd["spec"]["scope"] == "Cluster"
    assert crd["spec"]["names"]["plural"] == model.PLURAL
    assert crd["metadata"]["name"] == f"{model.PLURAL}.{model.GROUP}"
    (v,) = crd["spec"]["versions"]
    assert v["name"] == model.VERSION and v["served"] and v["storage"]


def test_configmap_config_is_the_static_policy():
    cfg = _plugin_config()
    assert cfg.cpuManagerPolicy == "static"
    assert str(cfg.reserved_cpus()) == "0"
    assert cfg.socketPath == "/var/run/nri/nri.sock"
    assert cfg.stateDirectory == "/var/lib/nri-cpumgr"


def test_example_config_parses():
    cfg = parse_config((DEPLOY / "examples/config.yaml").read_text(), "examples/config.yaml")
    assert cfg.cpuManagerPolicy == "static"


@pytest.mark.parametrize(("name", "version"), [
    ("containerd-1.7-nri.toml", 2), ("containerd-2.x-nri.toml", 3),
])
def test_containerd_snippets(name: str, version: int):
    doc = tomllib.loads((DEPLOY / name).read_text())
    assert doc["version"] == version
    nri = doc["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["disable"] is False and nri["disable_connections"] is False
    assert nri["socket_path"] == _plugin_config().socketPath


def test_crio_dropin():
    nri = tomllib.loads((DEPLOY / "crio-nri.conf").read_text())["crio"]["nri"]
    assert nri["enable_nri"] is True
    assert nri["nri_listen"] == _plugin_config().socketPath
    assert nri.get("nri_disable_connections", False) is False


def test_quota_admits_system_node_critical_pods():
    # clusters that limit critical priority classes by quota (ResourceQuota admission with
    # limitedResources, e.g. GKE) admit a system-node-critical pod outside kube-system only in
    # a namespace with a quota whose scopeSelector matches that class
    q = _all()["ResourceQuota/nri-cpumgr-critical-pods"]
    prio = _daemonset()["spec"]["template"]["spec"]["priorityClassName"]
    (expr,) = q["spec"]["scopeSelector"]["matchExpressions"]
    assert expr == {"scopeName": "PriorityClass", "operator": "In", "values": [prio]}
    assert int(q["spec"]["hard"]["pods"]) >= 1000  # one plugin pod per node


# --- the per-node-group overlay -------------------------------------------------------------
# Rendered here by the kustomize features the overlay uses (resources, nameSuffix, labels,
# patches: $patch: delete and strategic merge of maps with lists replaced), so the test needs no
# kustomize binary; when `kubectl` is on PATH its `kubectl kustomize` rendering must agree.

_RENDERED_KEYS = {"apiVersion", "kind", "resources", "nameSuffix", "labels", "patches"}


def _key(doc: dict[str, Any]) -> tuple[str, str, str]:
    md = doc["metadata"]
    return doc["kind"], md["name"], md.get("namespace", "")


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        assert k not in ("containers", "volumes", "volumeMounts", "env"), \
            f"{k}: a list with a merge key, which this renderer does not merge"
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


def _base_docs() -> list[dict[str, Any]]:
    k = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    docs = [d for r in k["resources"] for d in _docs(BASE / r)]
    tags = {i["name"]: i["newTag"] for i in k["images"]}
    for d in docs:
        if d["kind"] not in CLUSTER_SCOPED:
            d["metadata"]["namespace"] = k["namespace"]
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            name = c["image"].split(":")[0]
            if name in tags:
                c["image"] = f"{name}:{tags[name]}"
    return docs


def _render_overlay() -> list[dict[str, Any]]:
    k = yaml.safe_load((OVERLAY / "kustomization.yaml").read_text())
    assert set(k) <= _RENDERED_KEYS, set(k) - _RENDERED_KEYS
    assert k["resources"] == ["../../base"]
    docs = _base_docs()
    for p in k["patches"]:
        patch = yaml.safe_load(p["patch"] if "patch" in p else (OVERLAY / p["path"]).read_text())
        (target,) = [d for d in docs if _key(d) == _key(patch)]
        if patch.pop("$patch", None) == "delete":
            docs.remove(target)
        else:
            _merge(target, {k2: v for k2, v in patch.items() if k2 not in ("apiVersion", "kind")})
    for lab in k.get("labels", []):
        for d in docs:
            d["metadata"].setdefault("labels", {}).update(lab["pairs"])
            if lab.get("includeSelectors") and d["kind"] == "DaemonSet":
                d["spec"]["selector"]["matchLabels"].update(lab["pairs"])
                d["spec"]["template"]["metadata"]["labels"].update(lab["pairs"])
    sfx = k["nameSuffix"]
    renamed = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for d in docs:
        d["metadata"]["name"] += sfx
        if d["kind"] == "DaemonSet":
            spec = d["spec"]["template"]["spec"]
            if ("ServiceAccount", spec["serviceAccountName"]) in renamed:
                spec["serviceAccountName"] += sfx
            for v in spec["volumes"]:
                if "configMap" in v and ("ConfigMap", v["configMap"]["name"]) in renamed:
                    v["configMap"]["name"] += sfx
        if d["kind"] == "ClusterRoleBinding":
            if ("ClusterRole", d["roleRef"]["name"]) in renamed:
                d["roleRef"]["name"] += sfx
            for s in d["subjects"]:
                if (s["kind"], s["name"]) in renamed:
                    s["name"] += sfx
    return docs


def _node_matches(pod_spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the scheduler may place the pod on a node with these labels (nodeSelector and
    required node affinity; operators In, NotIn, Exists, DoesNotExist)."""
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    req = (pod_spec.get("affinity", {}).get("nodeAffinity", {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not req:
        return True

    def expr_ok(e: dict[str, Any]) -> bool:
        op, key = e["operator"], e["key"]
        return {"In": lambda: labels.get(key) in e["values"],
                "NotIn": lambda: labels.get(key) not in e["values"],
                "Exists": lambda: key in labels,
                "DoesNotExist": lambda: key not in labels}[op]()

    return any(all(expr_ok(e) for e in t["matchExpressions"]) for t in req["nodeSelectorTerms"])


def test_overlay_renders_valid_kubernetes():
    docs = _render_overlay()
    assert sorted(d["kind"] for d in docs) == ["ClusterRoleBinding", "ClusterRoleBinding",
                                               "ConfigMap", "DaemonSet", "ServiceAccount"]
    for doc in docs:
        assert kv.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_overlay_and_base_never_share_a_node_or_a_name():
    base = {_key(d): d for d in _base_docs()}
    over = {_key(d): d for d in _render_overlay()}
    assert not set(base) & set(over)  # applying both overwrites nothing
    (b_ds,) = [d for d in base.values() if d["kind"] == "DaemonSet"]
    (o_ds,) = [d for d in over.values() if d["kind"] == "DaemonSet"]
    b, o = b_ds["spec"]["template"]["spec"], o_ds["spec"]["template"]["spec"]
    linux = {"kubernetes.io/os": "linux"}
    nodes = {"unlabelled": linux, "big": {**linux, "nri-cpumgr/node-group": "big-nodes"},
             "windows-big": {"kubernetes.io/os": "windows", "nri-cpumgr/node-group": "big-nodes"}}
    placed = {n: (_node_matches(b, lab), _node_matches(o, lab)) for n, lab in nodes.items()}
    assert placed == {"unlabelled": (True, False), "big": (False, True),
                      "windows-big": (False, False)}
    # the overlay's DaemonSet does not select the base's pods
    sel = o_ds["spec"]["selector"]["matchLabels"]
    assert not sel.items() <= b_ds["spec"]["template"]["metadata"]["labels"].items()
    assert sel.items() <= o_ds["spec"]["template"]["metadata"]["labels"].items()


def test_overlay_references_its_own_config():
    over = {_key(d): d for d in _render_overlay()}
    (ds,) = [d for d in over.values() if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    (cm_name,) = [v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v]
    cm = over[("ConfigMap", cm_name, "nri-cpumgr")]
    cfg = parse_config(cm["data"]["config.yaml"], "deploy/overlays/big-nodes/configmap.yaml")
    assert str(cfg.reserved_cpus()) != str(_plugin_config().reserved_cpus())
    assert ("ServiceAccount", spec["serviceAccountName"], "nri-cpumgr") in over
    crbs = [d for d in over.values() if d["kind"] == "ClusterRoleBinding"]
    # the base's roles
    assert sorted(c["roleRef"]["name"] for c in crbs) == ["nri-cpumgr-nrt-exporter",
                                                         "nri-cpumgr-pod-reader"]
    assert {c["subjects"][0]["name"] for c in crbs} == {spec["serviceAccountName"]}
    # everything else (image, probes, security) is the base's
    assert spec["containers"] == _daemonset()["spec"]["template"]["spec"]["containers"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not on PATH")
@pytest.mark.parametrize("where", ["base", "overlay"])
def test_kubectl_kustomize_agrees(where: str):
    crd = _docs(DEPLOY / "crd/noderesourcetopologies.yaml")
    path, ours = (DEPLOY, crd + _base_docs()) if where == "base" else (OVERLAY, _render_overlay())
    out = subprocess.run(["kubectl", "kustomize", str(path)], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    theirs = {_key(d): d for d in yaml.safe_load_all(out) if d}
    assert theirs == {_key(d): d for d in ours}
