"""deploy/: every manifest is valid Kubernetes (offline JSON schemas from kubernetes-validate,
strict: unknown fields are errors), the kustomization lists them all, and the DaemonSet is
what the project documents (not privileged, no capabilities, probes on the metrics port, the
mounts the plugin needs, a ConfigMap the plugin accepts)."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv

from nri_cpumgr.config import parse_config
from nri_cpumgr.metrics import parse_address

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# oldest Kubernetes release NRI-enabled runtimes are used with (containerd 1.7) and the newest
# schema the validator ships
K8S_VERSIONS = ("1.26", kv.latest_version())
MANIFESTS = sorted(p for p in DEPLOY.glob("*.yaml") if p.name != "kustomization.yaml")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all() -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for p in MANIFESTS for d in _docs(p)}


def _daemonset() -> dict[str, Any]:
    return _all()["DaemonSet/nri-cpumgr"]


def _container() -> dict[str, Any]:
    (c,) = _daemonset()["spec"]["template"]["spec"]["containers"]
    return c


def _plugin_config():
    cm = _all()["ConfigMap/nri-cpumgr-config"]
    return parse_config(cm["data"]["config.yaml"], "deploy/configmap.yaml")


def test_the_expected_manifests_exist():
    assert set(_all()) == {"Namespace/nri-cpumgr", "ServiceAccount/nri-cpumgr",
                           "ConfigMap/nri-cpumgr-config", "DaemonSet/nri-cpumgr"}


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
    k = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert k["kind"] == "Kustomization"
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert sorted(k["resources"]) == [p.name for p in MANIFESTS]
    assert k["namespace"] == "nri-cpumgr"
    for doc in _all().values():
        ns = doc["metadata"]["name"] if doc["kind"] == "Namespace" else doc["metadata"]["namespace"]
        assert ns == k["namespace"], doc["kind"]
    # the image override names the image the DaemonSet uses
    assert _container()["image"].split(":")[0] in {i["name"] for i in k["images"]}


def test_container_is_locked_down():
    spec = _daemonset()["spec"]["template"]["spec"]
    sc = _container()["securityContext"]
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
    res = _container()["resources"]
    assert set(res) == {"requests", "limits"}
    # Burstable (requests < limits): the plugin must not take exclusive CPUs itself
    assert res["requests"]["cpu"] != res["limits"]["cpu"]


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


def test_kind_config_enables_nri():
    cluster = yaml.safe_load((DEPLOY / "kind/cluster.yaml").read_text())
    assert cluster["kind"] == "Cluster"
    (patch,) = cluster["containerdConfigPatches"]
    nri = tomllib.loads(patch)["plugins"]["io.containerd.nri.v1.nri"]
    assert nri["disable"] is False and nri["socket_path"] == _plugin_config().socketPath
