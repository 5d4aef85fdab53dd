"""nri-cpumgr plan on malformed manifests: every shape the reader does not expect is one line
naming the file and the field's path, exit status 2, never a traceback; two pods of one
namespace/name are refused with both places (the API server never holds two)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nri_cpumgr.cli import main
from nri_cpumgr.planner.manifest import ManifestError, load_pods

DUAL = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "dual-socket-smt"
CONFIG = "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"
C = "containers: [{name: c, resources: {requests: {cpu: 1}, limits: {cpu: 1}}}]"


def run_plan(tmp: Path, *texts: str | bytes, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """``plan`` on manifests holding ``texts`` (in tmp/m1.yaml, m2.yaml, ...): status,
    stdout, stderr."""
    cfg = tmp / "cfg.yaml"
    cfg.write_text(CONFIG)
    files = []
    for i, t in enumerate(texts, 1):
        f = tmp / f"m{i}.yaml"
        if isinstance(t, bytes):
            f.write_bytes(t)
        else:
            f.write_text(t)
        files.append(str(f))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["plan", "--config", str(cfg), "--sysfs-root", str(DUAL), *extra, *files])
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("text, message", [
    (f"kind: Pod\nmetadata: {{name: a}}\nspec: {{initContainers: 5, {C}}}\n",
     "m1.yaml document 1: spec.initContainers: expected a list, got an integer (5)"),
    ("kind: Pod\nmetadata: {name: a}\nspec: {containers: {c: 1}}\n",
     "m1.yaml document 1: spec.containers: expected a list, got a mapping ({'c': 1})"),
    (f"kind: Pod\nmetadata: [a]\nspec: {{{C}}}\n",
     "m1.yaml document 1: metadata: expected a mapping, got a list (['a'])"),
    ("kind: List\nitems: 5\n", "m1.yaml document 1: items: expected a list, got an integer (5)"),
    ("kind: List\nitems: [7]\n", "m1.yaml document 1 item 1: not a Kubernetes object "
     "(expected a mapping, got an integer (7))"),
    ("kind: Deployment\nmetadata: {name: d}\nspec: {template: 5}\n",
     "m1.yaml document 1: spec.template: expected a mapping, got an integer (5)"),
    ("kind: Deployment\nmetadata: {name: d}\nspec: [1]\n",
     "m1.yaml document 1: spec: expected a mapping, got a list ([1])"),
    ("kind: Deployment\nmetadata: {name: d}\nspec: {template: {spec: {containers: [3]}}}\n",
     "m1.yaml document 1 (Deployment template): spec.template.spec.containers[0]: "
     "expected a mapping, got an integer (3)"),
    ("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: 2, template: {metadata: "
     f"{{namespace: [x]}}, spec: {{{C}}}}}}}\n",
     "m1.yaml document 1: spec.template.metadata.namespace: expected a string, "
     "got a list (['x'])"),
    ("kind: CronJob\nmetadata: {name: j}\nspec: {jobTemplate: {spec: 4}}\n",
     "m1.yaml document 1: spec.jobTemplate.spec: expected a mapping, got an integer (4)"),
    ("kind: Pod\nmetadata: {name: a}\nspec: [1]\n",
     "m1.yaml document 1: spec: expected a mapping, got a list ([1])"),
    (f"kind: Pod\nmetadata: {{name: [a]}}\nspec: {{{C}}}\n",
     "m1.yaml document 1: metadata.name: expected a string, got a list (['a'])"),
    (f"kind: Pod\nmetadata: {{name: a, namespace: 5}}\nspec: {{{C}}}\n",
     "m1.yaml document 1: metadata.namespace: expected a string, got an integer (5)"),
    (f"kind: Pod\nmetadata: {{name: a, uid: 12}}\nspec: {{{C}}}\n",
     "m1.yaml document 1: metadata.uid: expected a string, got an integer (12)"),
    ("kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: 7}]}\n",
     "m1.yaml document 1: spec.containers[0].name: expected a string, got an integer (7)"),
    ("kind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, resources: [1]}]}\n",
     "m1.yaml document 1: spec.containers[0].resources: expected a mapping, "
     "got a list ([1])"),
    ("kind: Pod\nmetadata: {name: a}\nspec: {resources: 3, containers: [{name: c}]}\n",
     "m1.yaml document 1: spec.resources: expected a mapping, got an integer (3)"),
    ("kind: [Pod]\n", "m1.yaml document 1: kind: expected a string, got a list (['Pod'])"),
])
def test_malformed_shape_is_one_line_with_the_path(tmp_path, text, message):
    rc, out, err = run_plan(tmp_path, text)
    assert (rc, out) == (2, "")
    assert err == f"nri-cpumgr plan: {tmp_path / message}\n"


def test_spec_missing_still_says_missing():
    with pytest.raises(ManifestError, match=r"pod a: spec is missing$"):
        load_pods("kind: Pod\nmetadata: {name: a}\n", "f.yaml")


def test_a_file_not_utf8_is_one_line(tmp_path):
    text = f"kind: Pod\nmetadata: {{name: a}}\nspec: {{{C}}}\n"
    rc, out, err = run_plan(tmp_path, text.encode("utf-16"))
    assert (rc, out) == (2, "")
    assert err == (f"nri-cpumgr plan: {tmp_path / 'm1.yaml'}: not UTF-8 text "
                   "(byte 0: invalid start byte)\n")
    # latin-1 after valid text: the offset of the first bad byte
    rc, _, err = run_plan(tmp_path, text.encode() + b"# caf\xe9\n")
    assert rc == 2 and f"not UTF-8 text (byte {len(text) + 5}:" in err


def test_two_pods_of_one_name_in_two_files(tmp_path):
    one = "kind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, resources: " \
          "{limits: {cpu: N, memory: 1Gi}}}]}\n"
    rc, out, err = run_plan(tmp_path, one.replace("N", "1"), one.replace("N", "4"),
                            extra=("--json",))
    assert (rc, out) == (2, "")
    assert err == (f"nri-cpumgr plan: pod default/x is given twice: {tmp_path}/m1.yaml "
                   f"document 1 and {tmp_path}/m2.yaml document 1 (the API server holds one "
                   "pod of a name in a namespace)\n")
    # another namespace is another pod
    rc, out, _ = run_plan(tmp_path, one.replace("N", "1"),
                          one.replace("N", "4").replace("{name: x}", "{name: x, namespace: b}"),
                          extra=("--json",))
    assert rc == 0
    pods = json.loads(out)["pods"]
    assert [p["pod"] for p in pods] == ["default/x", "b/x"]
    assert pods[0]["uid"] != pods[1]["uid"]
    assert [len(p["containers"][0]["cpus"].split(",")) for p in pods] != [8, 8]


def test_one_deployment_given_twice(tmp_path):
    dep = f"kind: Deployment\nmetadata: {{name: d}}\nspec: {{replicas: 3, template: " \
          f"{{spec: {{{C}}}}}}}\n"
    rc, _, err = run_plan(tmp_path, dep, dep)
    assert rc == 2
    assert err == (f"nri-cpumgr plan: pod default/d-0 is given twice: {tmp_path}/m1.yaml "
                   f"document 1 (Deployment template) replica 0 and {tmp_path}/m2.yaml "
                   "document 1 (Deployment template) replica 0 (the API server holds one pod "
                   "of a name in a namespace)\n")
    assert run_plan(tmp_path, dep)[0] == 0


def test_duplicates_within_one_file_and_by_uid():
    pod = f"kind: Pod\nmetadata: {{name: NAME, uid: U}}\nspec: {{{C}}}\n"
    with pytest.raises(ManifestError) as ei:
        load_pods(pod.replace("NAME", "x") + "---\n" + pod.replace("NAME", "y")
                  + "---\n" + pod.replace("NAME", "x"), "f.yaml")
    # (y shares x's uid: that comes first)
    assert str(ei.value) == ("pods default/x (f.yaml document 1) and default/y (f.yaml "
                             "document 2) have one metadata.uid 'U'")
    with pytest.raises(ManifestError, match="pod default/x is given twice: f.yaml document 1 "
                                            "and f.yaml document 2"):
        load_pods(pod.replace("NAME", "x").replace(", uid: U", "") + "---\n"
                  + pod.replace("NAME", "x").replace(", uid: U", ""), "f.yaml")
    # a StatefulSet's pod and a Pod of its name: the API server would refuse the second
    sts = f"kind: StatefulSet\nmetadata: {{name: db}}\nspec: {{replicas: 2, template: " \
          f"{{spec: {{{C}}}}}}}\n"
    with pytest.raises(ManifestError, match="pod default/db-1 is given twice"):
        load_pods(sts + "---\n" + pod.replace("NAME", "db-1").replace(", uid: U", ""))


# ---- property: any shape is a plan or one line with status 2 -----------------------------
_VALID: list[dict[str, Any]] = [yaml.safe_load(t) for t in (
    "kind: Pod\nmetadata: {name: p, namespace: n, uid: u1}\nspec:\n"
    "  resources: {limits: {cpu: '4', memory: 4Gi}}\n"
    "  initContainers:\n  - {name: i, resources: {limits: {cpu: '1', memory: 1Gi}}}\n"
    "  - {name: s, restartPolicy: Always, resources: {requests: {cpu: 500m}}}\n"
    "  containers:\n  - {name: c, resources: {requests: {cpu: '2', memory: 1Gi}, "
    "limits: {cpu: '2', memory: 1Gi, hugepages-2Mi: 2Mi}}}\n",
    "kind: Deployment\nmetadata: {name: d, namespace: n}\nspec:\n  replicas: 2\n"
    "  template:\n    metadata: {labels: {a: b}}\n    spec:\n      containers:\n"
    "      - {name: c, resources: {limits: {cpu: '1', memory: 1Gi}}}\n",
    "kind: CronJob\nmetadata: {name: j}\nspec:\n  jobTemplate:\n    spec:\n      template:\n"
    "        spec: {containers: [{name: c}]}\n",
    "kind: List\nitems:\n- kind: Pod\n  metadata: {name: q}\n  spec: {containers: [{name: c}]}\n",
)]


def _paths(node: Any, at: tuple = ()) -> list[tuple]:
    out = [at]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*at, i))
    return out


_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2**70), st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["Pod", "List", "Always", "1", "500m", "1Gi", "", "-1", "a\nb"]),
    st.dates(),
)
_junk = st.recursive(
    _leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(st.sampled_from(
            ["kind", "metadata", "spec", "name", "namespace", "uid", "containers",
             "initContainers", "resources", "requests", "limits", "cpu", "memory",
             "template", "replicas", "items", "jobTemplate", "restartPolicy"]),
            st.integers(0, 3)), inner, max_size=4)),
    max_leaves=10,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(_VALID), pick=st.integers(0, 10**6), junk=_junk,
       drop=st.booleans())
def test_any_shape_is_a_plan_or_one_line_status_2(base, pick, junk, drop):
    doc = copy.deepcopy(base)
    paths = _paths(doc)
    path = paths[pick % len(paths)]
    if not path:
        doc = junk
    else:
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if drop and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = junk
    text = yaml.safe_dump(doc)
    with tempfile.TemporaryDirectory() as tmp:
        rc, out, err = run_plan(Path(tmp), text)
    assert rc in (0, 2), err
    if rc == 0:
        assert out and not err
    else:
        assert out == "" and err.startswith("nri-cpumgr plan: ") and err.count("\n") == 1, err


def test_a_name_with_a_line_break_still_gives_one_line(tmp_path):
    rc, out, err = run_plan(tmp_path, 'kind: Pod\nmetadata: {name: "a\\nb"}\n'
                                      "spec: {containers: []}\n")
    assert (rc, out) == (2, "")
    assert err == (f"nri-cpumgr plan: {tmp_path}/m1.yaml document 1: pod a\\nb: "
                   "spec.containers is empty\n")


def _topology(tmp: Path, edit) -> Path:
    """The dual-socket fixture as ``nri-cpumgr topology --json`` prints it, after ``edit``
    (a function changing the document), in tmp/node.json."""
    from nri_cpumgr.sysfs import discover
    from nri_cpumgr.topology.render import to_json

    doc = json.loads(json.dumps(to_json(discover(str(DUAL)), "node")))
    edit(doc)
    f = tmp / "node.json"
    f.write_text(json.dumps(doc))
    return f


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_a_cpu_given_twice_in_the_topology_names_it_and_both_rows(tmp_path):
    """Two rows of one CPU id: refused (a table keyed by id kept the last row, silently
    dropping the other and planning on a machine that does not exist), one line naming the
    file, the CPU and both rows, exit status 2; the same for a NUMA node and for
    ``plan --reconfigure``."""

    def dup_cpu(doc):
        doc["cpus"][5] = dict(doc["cpus"][5], cpu=2)

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG)
    pod = tmp_path / "pod.yaml"
    pod.write_text(f"kind: Pod\nmetadata: {{name: a}}\nspec: {{{C}}}\n")
    topo = _topology(tmp_path, dup_cpu)
    rc, out, err = _cli("plan", "--config", str(cfg), "--topology", str(topo), str(pod))
    assert (rc, out) == (2, "")
    assert err == (f"nri-cpumgr plan: {topo}: CPU 2 is given twice: cpus[2] (socket 0, "
                   "core 2, NUMA node 0) and cpus[5] (socket 1, core 5, NUMA node 1)\n")
    (tmp_path / "state").mkdir()
    assert _cli("plan", "--config", str(cfg), "--topology", str(topo), "--state",
                str(tmp_path / "state"), "--reconfigure", str(cfg)) == (2, "", err)

    def dup_node(doc):
        doc["numa_nodes"].append(dict(doc["numa_nodes"][0]))

    topo = _topology(tmp_path, dup_node)
    rc, _, err = _cli("plan", "--config", str(cfg), "--topology", str(topo), str(pod))
    assert rc == 2 and err == (f"nri-cpumgr plan: {topo}: NUMA node 0 is given twice: "
                               "numa_nodes[0] and numa_nodes[2]\n")


def test_a_scenarios_machine_with_a_cpu_given_twice_is_a_config_error():
    from nri_cpumgr.planner.scenario import run_scenario

    rows = [{"cpu": c, "core": c, "socket": 0, "numa": 0} for c in (0, 1, 1)]
    got = run_scenario({"name": "s", "machine": {"cpus": rows}, "config": {}, "events": []})
    assert got["configError"] == ("CPU 1 is given twice: machine.cpus[1] (socket 0, core 1, "
                                  "NUMA node 0) and machine.cpus[2] (socket 0, core 1, NUMA "
                                  "node 0)")


def _set(path: tuple[Any, ...], value: Any):
    def edit(doc: Any) -> None:
        *head, last = path
        for k in head:
            doc = doc[k]
        if value is _DROP:
            del doc[last]
        else:
            doc[last] = value
    return edit


_DROP = object()


@pytest.mark.parametrize("path, value, want", [
    (("cpus", 3, "numa"), -1, "cpus[3].numa: expected a whole number >= 0, got a number -1"),
    (("cpus", 2, "core"), _DROP, "cpus[2]: core is missing"),
    (("cpus", 1, "socket"), "x", "cpus[1].socket: expected a whole number >= 0, got a "
                                 "string 'x'"),
    (("cpus", 0, "uncore"), 1.5, "cpus[0].uncore: expected a whole number >= 0, got a "
                                 "number 1.5"),
    (("cpus", 4), 7, "cpus[4]: expected an object, got a number 7"),
    (("cpus",), [], "cpus: empty (a machine has at least one CPU)"),
    (("cpus",), None, "cpus: expected a list of CPU rows, got null"),
    (("declared", "NumCores"), _DROP, "declared: NumCores is missing"),
    (("numa_nodes", 0, "id"), True, "numa_nodes[0].id: expected a whole number >= 0, got a "
                                    "boolean"),
    (("numa_nodes", 1, "distances"), {"0": "far"},
     "numa_nodes[1].distances.0: expected a whole number >= 0, got a string 'far'"),
])
def test_a_topology_of_another_shape_is_one_line_naming_the_row_and_key(tmp_path, path,
                                                                         value, want):
    """`plan --topology` on a document `topology --json` would not print: one line naming
    the file, the row and the key, exit 2 (not `-1-1` in the plan, a Python repr, or
    "CPU(s) 0 not on this machine (CPUs )")."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(CONFIG)
    pod = tmp_path / "pod.yaml"
    pod.write_text(f"kind: Pod\nmetadata: {{name: a}}\nspec: {{{C}}}\n")
    topo = _topology(tmp_path, _set(path, value))
    rc, out, err = _cli("plan", "--config", str(cfg), "--topology", str(topo), str(pod))
    assert (rc, out, err) == (2, "", f"nri-cpumgr plan: {topo}: {want}\n")
