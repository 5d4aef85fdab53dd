"""deploy/helm/nri-cpumgr: `helm lint` passes, and `helm template` renders, for the same
settings, the objects the kustomization (deploy/, as tests/unit/test_deploy_manifests.py renders
it) gives: with the default values exactly deploy/'s objects plus Helm's own labels and the
config checksum; with changed values (image, configuration) what the kustomize edit of the same
change gives. The values that have no kustomize counterpart are checked on their own: the NRT
exporter off, paths and the metrics port following the configuration, a config change (and only
that) changing the checksum that rolls the DaemonSet.

helm is the one scripts/modern/build.sh builds (helm.sh/helm/v4 from the Go module proxy, into
the machine-wide cache; `make test` builds it first). Without it these tests skip, or fail with
``CI`` set.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate import utils as kv

from nri_cpumgr.config import parse_config
from tests.unit.test_deploy_manifests import DEPLOY, K8S_VERSIONS, _base_docs, _docs

REPO = DEPLOY.parent
CHART = DEPLOY / "helm" / "nri-cpumgr"
NS = "nri-cpumgr"
HELM_LABELS = ("app.kubernetes.io/managed-by", "helm.sh/chart")
CHECKSUM = "checksum/config"


def _helm() -> Path:
    r = subprocess.run(["bash", str(REPO / "scripts/modern/build.sh"), "--print", "helm"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        msg = f"helm not built: {r.stderr.strip()} (`make modern-tools`)"
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI is set: the chart tests are required)", pytrace=False)
        pytest.skip(msg)
    return Path(r.stdout.strip()) / "helm"


@pytest.fixture(scope="module")
def helm() -> Path:
    return _helm()


def _run(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # HOME and the helm dirs in a scratch place: the test reads no user's helm configuration
    env = dict(os.environ, HELM_CACHE_HOME="/nonexistent/cache",
               HELM_CONFIG_HOME="/nonexistent/config", HELM_DATA_HOME="/nonexistent/data")
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120,
                          env=env)


def render(helm: Path, *sets: str, values: dict[str, Any] | None = None,
           tmp: Path | None = None) -> list[dict[str, Any]]:
    """``helm template`` of the chart (release nri-cpumgr in namespace nri-cpumgr, CRDs
    included) with ``--set`` items and an optional values file; the parsed documents."""
    args = ["template", "nri-cpumgr", str(CHART), "--namespace", NS, "--include-crds"]
    for s in sets:
        args += ["--set", s]
    if values is not None:
        assert tmp is not None
        f = tmp / "values.yaml"
        f.write_text(yaml.safe_dump(values))
        args += ["--values", str(f)]
    r = _run(helm, *args)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def _key(d: dict[str, Any]) -> tuple[str, str]:
    return d["kind"], d["metadata"]["name"]


def normalized(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The documents by (kind, name), with what legitimately differs between the two
    renderings taken out: Helm's own labels, the checksum annotation (checked on its own) and
    the ConfigMap's config.yaml text (compared parsed: the chart writes the keys sorted)."""
    out = {}
    for d in copy.deepcopy(docs):
        labels = d["metadata"].get("labels", {})
        for k in HELM_LABELS:
            labels.pop(k, None)
        if d["kind"] == "DaemonSet":
            d["spec"]["template"]["metadata"]["annotations"].pop(CHECKSUM, None)
        if d["kind"] == "ConfigMap":
            d["data"]["config.yaml"] = yaml.safe_load(d["data"]["config.yaml"])
        out[_key(d)] = d
    return out


def kustomize_docs() -> list[dict[str, Any]]:
    """`kubectl apply -k deploy/`'s objects (the CRD and the base)."""
    return _docs(DEPLOY / "crd/noderesourcetopologies.yaml") + _base_docs()


def _ds(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds


def _cfg_doc(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    return yaml.safe_load(cm["data"]["config.yaml"])


def test_helm_lint(helm: Path) -> None:
    r = _run(helm, "lint", "--strict", str(CHART))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in r.stdout
    assert "[ERROR]" not in r.stdout and "[WARNING]" not in r.stdout, r.stdout
    # (helm 4's lint renders `required` values leniently; the rendering test below checks
    # that a missing metricsAddress fails)


def test_default_values_render_what_kustomize_renders(helm: Path) -> None:
    ours = render(helm, "namespace.create=true")
    assert normalized(ours) == normalized(kustomize_docs())
    # Helm's labels are on every object but the CRD (crds/ is not templated)
    for d in ours:
        if d["kind"] != "CustomResourceDefinition":
            assert d["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", _key(d)
    # the default namespace.create=false leaves the Namespace to `--create-namespace`
    assert ("Namespace", NS) not in normalized(render(helm))


def test_rendered_objects_are_valid_kubernetes(helm: Path) -> None:
    for sets in ((), ("nrtExporter.enabled=false",)):
        for d in render(helm, "namespace.create=true", *sets):
            if d["kind"] == "CustomResourceDefinition":
                continue  # test_deploy_manifests checks the CRD
            for v in K8S_VERSIONS:
                assert kv.validate(d, v, strict=True) == kv.major_minor(v), _key(d)
    cfg = _cfg_doc(render(helm))
    parse_config(yaml.safe_dump(cfg), "chart values")  # the plugin accepts the default config


def test_changed_values_render_what_the_kustomize_edit_renders(helm: Path, tmp_path: Path) -> None:
    # the same change both ways: `kustomize edit set image nri-cpumgr=reg.example/nri-cpumgr:0.2`
    # plus a ConfigMap patch, and the chart's image and config values
    cfg = yaml.safe_load(yaml.safe_load(
        (DEPLOY / "base/configmap.yaml").read_text())["data"]["config.yaml"])
    cfg.update(reservedSystemCPUs="0-1", cpuManagerPolicyOptions={"full-pcpus-only": "true"},
               featureGates={"InPlacePodVerticalScalingExclusiveCPUs": True},
               sharedPoolGrowDelay="2s")
    want = kustomize_docs()
    for d in want:
        for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            c["image"] = "reg.example/nri-cpumgr:0.2"
        if d["kind"] == "ConfigMap":
            d["data"]["config.yaml"] = yaml.safe_dump(cfg)
    ours = render(helm, values={"namespace": {"create": True},
                                "image": {"repository": "reg.example/nri-cpumgr", "tag": "0.2"},
                                "config": cfg}, tmp=tmp_path)
    assert normalized(ours) == normalized(want)
    parse_config(yaml.safe_dump(_cfg_doc(ours)), "chart values")


def test_the_config_checksum_rolls_the_daemonset_on_a_config_change_only(helm: Path) -> None:
    def checksum(*sets: str) -> str:
        return _ds(render(helm, *sets))["spec"]["template"]["metadata"]["annotations"][CHECKSUM]

    base = checksum()
    assert len(base) == 64 and int(base, 16) >= 0
    assert checksum("config.reservedSystemCPUs=1") != base
    assert checksum("config.sharedPoolGrowDelay=2s") not in (base, checksum(
        "config.reservedSystemCPUs=1"))
    # an image or resources change rolls the pods by itself; the checksum stays
    assert checksum("image.tag=0.2", "resources.plugin.limits.cpu=2") == base


def test_nrt_exporter_off(helm: Path) -> None:
    docs = render(helm, "nrtExporter.enabled=false")
    kinds = {_key(d) for d in docs}
    assert ("ClusterRole", "nri-cpumgr-nrt-exporter") not in kinds
    assert ("ClusterRoleBinding", "nri-cpumgr-nrt-exporter") not in kinds
    spec = _ds(docs)["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["nri-cpumgr"]
    # the plugin's pod watch (podSpecSource apiServer, the default) keeps its credentials
    (plugin,) = spec["containers"]
    assert "api-access" in [m["name"] for m in plugin["volumeMounts"]]
    assert ("ClusterRole", "nri-cpumgr-pod-reader") in kinds
    # neither the exporter nor the watch: no API credentials in the pod at all
    none = render(helm, "nrtExporter.enabled=false", "config.podSpecSource=none")
    nspec = _ds(none)["spec"]["template"]["spec"]
    assert "api-access" not in [v["name"] for v in nspec["volumes"]]
    assert "env" not in nspec["containers"][0]
    assert ("ClusterRole", "nri-cpumgr-pod-reader") not in {_key(d) for d in none}
    on = _ds(render(helm, "nrtExporter.env[0].name=X", "nrtExporter.env[0].value=y"))
    (exp,) = [c for c in on["spec"]["template"]["spec"]["containers"]
              if c["name"] == "nrt-exporter"]
    assert [e["name"] for e in exp["env"]] == ["NODE_NAME", "X"]


def test_paths_and_port_follow_the_config(helm: Path) -> None:
    docs = render(helm, "config.socketPath=/run/k8s/nri/nri.sock",
                  "config.stateDirectory=/srv/cpumgr", "config.metricsAddress=127.0.0.1:9200",
                  "tolerations=null")
    spec = _ds(docs)["spec"]["template"]["spec"]
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["nri-socket"]["hostPath"]["path"] == "/run/k8s/nri"
    assert vols["state"]["hostPath"]["path"] == "/srv/cpumgr"
    for c in spec["containers"]:
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts["state"] == "/srv/cpumgr"
        if c["name"] == "nri-cpumgr":
            assert mounts["nri-socket"] == "/run/k8s/nri"
            assert c["ports"][0]["containerPort"] == 9200
    assert _ds(docs)["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9200"
    assert "tolerations" not in spec
    r = _run(helm, "template", "x", str(CHART), "--set", "config.metricsAddress=nonsense")
    assert r.returncode != 0 and "expected host:port" in r.stderr
    # a bare port (a number to --set) rendered, and the plugin then refused it at every start
    # ("metricsAddress: expected a string, got a number (9109)"): refused here instead
    r = _run(helm, "template", "x", str(CHART), "--set", "config.metricsAddress=9109")
    assert r.returncode != 0 and 'config.metricsAddress "9109": expected host:port, e.g. ' \
        '":9109"' in r.stderr, r.stderr
    r = _run(helm, "template", "x", str(CHART), "--set", "config.metricsAddress=")
    assert r.returncode != 0 and "config.metricsAddress must be set" in r.stderr


@pytest.mark.parametrize(("value", "message"), [
    ("config.stateDirectory=var/lib/nri-cpumgr",
     'config.stateDirectory "var/lib/nri-cpumgr": expected an absolute path'),
    ("config.socketPath=nri.sock", 'config.socketPath "nri.sock": expected an absolute path'),
    ("config.logFile=nri-cpumgr.log", 'config.logFile "nri-cpumgr.log": expected an absolute '
                                      "path"),
])
def test_a_relative_path_is_refused_at_render(helm: Path, value: str, message: str) -> None:
    """The paths the plugin refuses when relative (a hostPath volume, or the plugin's
    working directory, has no meaning for them) fail ``helm template``, naming the value."""
    r = _run(helm, "template", "x", str(CHART), "--set", value)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    docs = render(helm, "config.logFile=/var/log/nri-cpumgr.log")
    assert parse_config(yaml.safe_dump(_cfg_doc(docs))).logFile == "/var/log/nri-cpumgr.log"


def test_a_numeric_plugin_index_is_written_as_its_two_digits(helm: Path, tmp_path: Path) -> None:
    """``--set config.pluginIndex=10`` (a number to helm, a string of two digits to the
    plugin, which refuses a number): the chart writes "10"; from a values file too; one
    digit is padded; a number outside 0-99 fails the render naming the value."""
    for sets, values, want in ((("config.pluginIndex=10",), None, "10"),
                               (("config.pluginIndex=9",), None, "09"),
                               ((), {"config": {"pluginIndex": 42}}, "42"),
                               ((), None, "90")):
        docs = render(helm, *sets, values=values, tmp=tmp_path)
        assert _cfg_doc(docs)["pluginIndex"] == want
        assert parse_config(yaml.safe_dump(_cfg_doc(docs))).pluginIndex == want
    for bad in ("100", "-1"):
        r = _run(helm, "template", "x", str(CHART), "--set", f"config.pluginIndex={bad}")
        assert r.returncode != 0 and f"config.pluginIndex {bad}: expected two digits" in r.stderr


def test_make_chart_builds_a_chart_repository(helm: Path, tmp_path: Path) -> None:
    """``make chart`` (scripts/chart.sh): the packaged chart and an index.yaml that lists it
    with its version and digest, what ``helm repo add`` reads (the cluster test installs from
    it over HTTP: tests/cluster/test_modern.py)."""
    import hashlib

    r = subprocess.run(["bash", str(REPO / "scripts/chart.sh")], capture_output=True,
                       text=True, timeout=300, cwd=REPO,
                       env=dict(os.environ, HELM=str(helm), OUT=str(tmp_path)))
    assert r.returncode == 0, r.stdout + r.stderr
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    tgz = tmp_path / f"nri-cpumgr-{chart['version']}.tgz"
    assert tgz.is_file(), sorted(tmp_path.iterdir())
    index = yaml.safe_load((tmp_path / "index.yaml").read_text())
    (entry,) = index["entries"]["nri-cpumgr"]
    assert entry["version"] == chart["version"] and entry["appVersion"] == chart["appVersion"]
    assert entry["urls"] == [tgz.name]
    assert entry["digest"] == hashlib.sha256(tgz.read_bytes()).hexdigest()
    shown = _run(helm, "show", "chart", str(tgz))
    assert shown.returncode == 0 and "name: nri-cpumgr" in shown.stdout, shown.stderr


def _ds(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "DaemonSet")


def test_node_preparation_is_opt_in(helm: Path) -> None:
    """``nodePreparation`` (off by default: no init container, no hostPID, no privilege);
    on, an init container runs ``nri-cpumgr enable-nri`` for the runtime's config with the
    host's config directory mounted under /host, privileged, in the host's PID namespace;
    ``dryRun`` adds ``--dry-run``; CRI-O's drop-in directory; an unknown runtime is refused."""
    spec = _ds(render(helm))["spec"]["template"]["spec"]
    assert "initContainers" not in spec and "hostPID" not in spec
    assert "runtime-config" not in {v["name"] for v in spec["volumes"]}
    spec = _ds(render(helm, "nodePreparation.enabled=true",
                      "nodePreparation.dryRun=true"))["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    assert spec["hostPID"] is True and init["securityContext"] == {"privileged": True}
    assert init["command"] == ["nri-cpumgr"]
    assert init["args"] == ["enable-nri", "--runtime", "containerd", "--config",
                            "/etc/containerd/config.toml", "--host-root", "/host",
                            "--socket-path", "/var/run/nri/nri.sock", "--dry-run"]
    assert init["image"] == spec["containers"][0]["image"]
    assert init["volumeMounts"] == [{"name": "runtime-config", "mountPath": "/host/etc/containerd"}]
    vol = next(v for v in spec["volumes"] if v["name"] == "runtime-config")
    assert vol["hostPath"] == {"path": "/etc/containerd", "type": "DirectoryOrCreate"}
    spec = _ds(render(helm, "nodePreparation.enabled=true",
                      "nodePreparation.runtime=crio"))["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    assert init["args"][:5] == ["enable-nri", "--runtime", "crio", "--config",
                                "/etc/crio/crio.conf.d/90-nri.conf"]
    assert "--dry-run" not in init["args"]
    spec = _ds(render(helm, "nodePreparation.enabled=true",
                      "config.socketPath=/run/nri/custom.sock"))["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    assert init["args"][init["args"].index("--socket-path") + 1] == "/run/nri/custom.sock"
    r = _run(helm, "template", "nri-cpumgr", str(CHART), "--namespace", NS,
             "--set", "nodePreparation.enabled=true", "--set", "nodePreparation.runtime=docker")
    assert r.returncode != 0 and "containerd or crio, not docker" in r.stderr


@pytest.mark.parametrize(("value", "message"), [
    ("image.tag=", "image.tag must be set: the tag of the image you pushed"),
    ("image.tag=null", "image.tag must be set"),
    ("image.repository=", "image.repository must be set: the registry and name of the image"),
])
def test_an_empty_image_is_refused_at_render(helm: Path, value: str, message: str) -> None:
    """An empty image tag or repository fails ``helm template`` naming the value (an empty
    tag rendered ``image: nri-cpumgr:``, which helm refused as 'mapping values are not
    allowed in this context'; an empty repository rendered the image ``:dev``)."""
    r = _run(helm, "template", "x", str(CHART), "--set", value)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    (image,) = {c["image"] for c in _ds(render(helm, "image.tag=v1"))["spec"]["template"]
                ["spec"]["containers"]}
    assert image == "nri-cpumgr:v1"
