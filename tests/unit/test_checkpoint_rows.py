"""The checkpoint's container rows kept as canonical JSON per container
(ContainerManager.rows_json): the text must be what encoding rows() gives, container by
container, through every change a row can see, and a file written from it must load."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from nri_cpumgr.checkpoint.store import Checkpoint
from nri_cpumgr.cm.container_manager import AdmissionError
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.jsontext import RawJSON, canonical, canonical_parts, encode
from nri_cpumgr.podmodel import QOSClass
from tests.conformance_data import topology
from tests.unit.test_container_manager import guaranteed, info, manager


def by_id(rows):
    return {r["id"]: r for r in rows}


def check(m, tmp_path):
    """rows_json parses to rows() (order aside) and is byte for byte their encoding; the
    checkpoint body built from it is the canonical text of the plain body and loads."""
    raw = m.rows_json()
    assert raw is not None
    text = bytes(raw)
    parsed = json.loads(text)
    assert by_id(parsed) == by_id(m.rows()) and len(parsed) == len(m.rows())
    assert text == b"[" + b",".join(encode(r) for r in parsed) + b"]"
    details = m.policy.topology.details  # (each row's NUMA nodes, worked out here again:
    for r in parsed:                      # the manager keeps them per cpuset between calls)
        nodes = CPUSet(details[c].numa for c in CPUSet.parse(r["cpus"]))
        assert r["numa"] == str(nodes), r
    body = m.checkpoint(encoded=True)
    assert isinstance(body["containers"], RawJSON)
    plain = {**body, "containers": parsed}
    assert canonical(body) == encode(plain)
    cp = Checkpoint(tmp_path / "state.json")
    cp.save(body)
    assert cp.load() == plain  # (load verifies the checksum over the parsed body)
    return parsed


def test_rows_json_follows_every_change(tmp_path):
    m = manager(topology("dual-socket-ht"), reserved="0")
    tricky = 'a"cpus":"","numa":""\u00e9\\'  # the split patterns inside a name, escaped
    m.admit(info("be", "p-be", name=tricky))
    m.admit(info("bu", "p-bu", qos=QOSClass.BURSTABLE, cpus_m=500))
    first = check(m, tmp_path)
    assert by_id(first)["be"]["container"] == tricky
    pool_before = by_id(first)["be"]["cpus"]
    m.admit(guaranteed("g1", "p-g1", 2))  # the pool shrinks: every shared row follows
    rows = by_id(check(m, tmp_path))
    assert rows["be"]["cpus"] == rows["bu"]["cpus"] == str(m.shared_pool()) != pool_before
    assert rows["g1"]["exclusive"] and rows["g1"]["cpus"] == str(m.state.assignments["p-g1"]["c"])
    m.stop("g1")  # a changed field of one row
    assert by_id(check(m, tmp_path))["g1"]["stopped"] is True
    m.containers["bu"].mems = CPUSet({1})  # a field assigned to (its assigner tells)
    m.row_changed("bu")
    assert by_id(check(m, tmp_path))["bu"]["mems"] == "1"
    m.remove("g1")  # a row goes, the pool grows back
    rows = by_id(check(m, tmp_path))
    assert "g1" not in rows and rows["be"]["cpus"] == pool_before
    m.admit(info("new", "p-new"))  # a row comes
    assert set(by_id(check(m, tmp_path))) == {"be", "bu", "new"}
    assert set(m._row_text) == {"be", "bu", "new"}  # nothing kept for removed containers
    m.synchronize([info("be", "p-be", name=tricky), guaranteed("g2", "p-g2", 1)])
    assert set(by_id(check(m, tmp_path))) == {"be", "g2"}


def test_plain_body_without_raw_text_is_unchanged():
    body = {"b": [1, {"y": 2, "x": "é"}], "a": "0-3"}
    assert canonical(body) == json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    assert canonical({"b": RawJSON(b'[{"x":1}]'), "a": "s"}) == b'{"a":"s","b":[{"x":1}]}'


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), st.one_of(
    st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=3),
    st.builds(lambda xs: RawJSON(encode(xs)), st.lists(st.text(max_size=3), max_size=3))),
    max_size=5))
def test_canonical_parts_are_the_canonical_text_in_pieces(body):
    """The checkpoint's writer checksums and writes the pieces: their concatenation is the
    canonical text, and a RawJSON value is a piece of its own, the same object (not copied)."""
    parts = canonical_parts(body)
    assert b"".join(parts) == canonical(body)
    raw = [piece for v in body.values() if isinstance(v, RawJSON) for piece in v.parts]
    assert all(any(p is piece for p in parts) for piece in raw)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["be", "g1", "g2", "stop", "remove", "update",
                                            "pod", "sync"]), st.integers(0, 5)),
                max_size=40))
def test_rows_json_equals_rows_under_churn(tmp_path_factory, steps):
    """Whatever happens to the containers, the kept text is the encoding of rows()."""
    m = manager(topology("dual-socket-ht"), reserved="0")
    for op, k in steps:
        cid = f"c{k}"
        try:
            if op == "be":
                m.admit(info(cid, f"p{k}"))
            elif op in ("g1", "g2"):
                m.admit(guaranteed(cid, f"p{k}", int(op[1])))
            elif op == "stop":
                m.stop(cid)
            elif op == "remove":
                m.remove(cid)
            elif op == "update":
                m.update(cid)
            elif op == "pod":
                m.remove_pod(f"p{k}")
            else:
                m.synchronize([t.info for t in m.containers.values() if not t.stopped])
        except AdmissionError:
            pass
        text = bytes(m.rows_json())
        assert text == b"[" + b",".join(encode(r) for r in json.loads(text)) + b"]"
        assert by_id(json.loads(text)) == by_id(m.rows())


@settings(max_examples=200, deadline=None)
@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                  max_size=4),
    max_leaves=20))
def test_encode_is_json_dumps_canonical(value):
    """jsontext.encode (one encoder kept for every call, issue 34) writes what json.dumps
    writes with sorted keys and no blanks."""
    assert encode(value) == json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def test_the_shared_rows_text_follows_a_removal_and_a_changed_pool(tmp_path):
    """The shared rows' joined text is kept between checkpoints: a shared container removed,
    one added, one stopped, or a pool that changes (an exclusive container comes or goes, and
    back again) each give the rows as they are."""
    m = manager(topology("dual-socket-ht"), reserved="0")
    for k in range(4):
        m.admit(info(f"be{k}", f"pb{k}"))
    first = check(m, tmp_path)
    assert {r["id"] for r in first} == {"be0", "be1", "be2", "be3"}
    m.remove("be1")
    assert {r["id"] for r in check(m, tmp_path)} == {"be0", "be2", "be3"}
    m.admit(guaranteed("g", "pg", 2))  # the pool shrinks: the shared rows' cpus with it
    rows = by_id(check(m, tmp_path))
    assert rows["be0"]["cpus"] == str(m.shared_pool()) and rows["g"]["exclusive"]
    m.remove("g")  # and grows back: the first filling again
    assert by_id(check(m, tmp_path))["be0"]["cpus"] == by_id(first)["be0"]["cpus"]
    m.stop("be2")
    assert by_id(check(m, tmp_path))["be2"]["stopped"] is True
    m.admit(info("be9", "pb9"))
    assert set(by_id(check(m, tmp_path))) == {"be0", "be2", "be3", "be9"}
