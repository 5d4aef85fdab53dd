import json

import pytest

from nri_cpumgr.checkpoint import Checkpoint, CheckpointError


def test_roundtrip_and_atomic_write(tmp_path):
    cp = Checkpoint(tmp_path / "sub" / "state")
    assert cp.load() is None
    body = {"policyName": "static", "defaultCpuSet": "0,2-3", "entries": {"u": {"c": "1"}}}
    cp.save(body)
    assert cp.load() == body
    assert not list((tmp_path / "sub").glob(".*tmp"))
    body2 = dict(body, defaultCpuSet="0")
    cp.save(body2)
    assert cp.load() == body2


def test_a_write_that_is_not_durable_skips_the_fsyncs_only(tmp_path, monkeypatch):
    """``durable=False``: the same atomic file (temp file + rename), no fsync; the default
    fsyncs the file and its directory."""
    import os

    from nri_cpumgr.checkpoint import store

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(store.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    cp = Checkpoint(tmp_path / "state")
    body = {"policyName": "static", "defaultCpuSet": "0-3", "entries": {}}
    cp.save(body, durable=False)
    assert synced == []
    assert cp.load() == body
    assert not list(tmp_path.glob(".*tmp"))
    cp.save(dict(body, defaultCpuSet="0"))
    assert len(synced) == 2  # the file, then the directory
    assert cp.load() == dict(body, defaultCpuSet="0")


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda raw: raw[: len(raw) // 2], "not JSON"),
        (lambda raw: raw.replace(b'"0,2-3"', b'"0-3"'), "checksum mismatch"),
        (lambda raw: raw.replace(b'"version": 2', b'"version": 9'), "unknown version"),
        (lambda raw: raw.replace(b'"version": 2', b'"version": "2"'), "unknown version"),
        (lambda raw: b"[]", "missing data"),
        (lambda raw: b"\xff\xfe", "not JSON"),
    ],
)
def test_corrupt_checkpoint_is_a_clear_error(tmp_path, mutate, reason):
    cp = Checkpoint(tmp_path / "state")
    cp.save({"defaultCpuSet": "0,2-3"})
    raw = cp.path.read_bytes()
    assert json.loads(raw)["version"] == 2
    cp.path.write_bytes(mutate(raw))
    with pytest.raises(CheckpointError, match=reason) as ei:
        cp.load()
    assert str(cp.path) in str(ei.value)


ROW = (b'{"container":"c","cpus":"1","exclusive":true,"id":"c","pod":"n/p","podUID":"u",'
       b'"qos":"Guaranteed"}')


def test_the_checksum_is_the_crc32_of_the_canonical_body(tmp_path):
    """Version 2: ``checksum`` is zlib's CRC-32 of the body's canonical JSON (sorted keys, no
    blanks), an unsigned int; one changed byte of the body is a mismatch."""
    import zlib

    from nri_cpumgr.jsontext import RawJSON

    cp = Checkpoint(tmp_path / "state")
    body = {"policyName": "static", "entries": {"u": {"c": "1"}}, "defaultCpuSet": "0,2-3",
            "containers": RawJSON(b'[' + ROW + b']')}
    cp.save(body)
    doc = json.loads(cp.path.read_bytes())
    canonical = (b'{"containers":[' + ROW + b'],"defaultCpuSet":"0,2-3",'
                 b'"entries":{"u":{"c":"1"}},"policyName":"static"}')
    assert doc["checksum"] == zlib.crc32(canonical)
    assert doc["data"] == json.loads(canonical) == cp.load()
    cp.path.write_bytes(cp.path.read_bytes().replace(b'"cpus":"1"', b'"cpus":"2"'))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        cp.load()


def _write_v1(path, body, digest=None):
    """A checkpoint as the plugin wrote it before issue 34 (format 1: sha256 hex digest)."""
    import hashlib

    text = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    digest = digest or hashlib.sha256(text).hexdigest()
    path.write_text(json.dumps({"checksum": digest, "version": 1, "data": body}))


def test_a_version_1_checkpoint_is_still_read(tmp_path):
    """An upgrade's first start reads the previous version's file (sha256); the next write
    is version 2."""
    body = {"policyName": "static", "defaultCpuSet": "0,2-3", "entries": {"u": {"c": "1"}}}
    cp = Checkpoint(tmp_path / "state")
    _write_v1(cp.path, body)
    assert cp.load() == body
    cp.save(body)
    assert json.loads(cp.path.read_bytes())["version"] == 2
    assert cp.load() == body


def test_a_version_1_checkpoint_with_a_wrong_digest_is_corrupt(tmp_path):
    """A version 1 file is verified with its own algorithm: its sha256 digest, not a
    CRC-32 (a v1 file carrying the body's CRC-32 is as corrupt as one with a bad digest)."""
    import zlib

    body = {"policyName": "static", "defaultCpuSet": "0-3", "entries": {}}
    cp = Checkpoint(tmp_path / "state")
    _write_v1(cp.path, body, "0" * 64)
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        cp.load()
    crc = zlib.crc32(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())
    cp.path.write_text(json.dumps({"checksum": crc, "version": 1, "data": body}))
    with pytest.raises(CheckpointError, match="checksum mismatch"):
        cp.load()


def test_a_short_write_is_completed(tmp_path, monkeypatch):
    """The file is written with one writev; when the kernel takes less, the rest follows."""
    from nri_cpumgr.checkpoint import store

    real = store.os.writev
    monkeypatch.setattr(store.os, "writev", lambda fd, parts: real(fd, [parts[0][:5]]))
    cp = Checkpoint(tmp_path / "state")
    body = {"policyName": "static", "defaultCpuSet": "0-3", "entries": {"u": {"c": "1"}}}
    cp.save(body)
    assert cp.load() == body


def test_background_writer_writes_the_newest_snapshot(tmp_path):
    from nri_cpumgr.checkpoint import BackgroundWriter

    cp = Checkpoint(tmp_path / "state")
    w = BackgroundWriter()
    for i in range(50):
        w.submit(cp, {"n": i})
    assert w.flush(5)
    assert cp.load() == {"n": 49}
    w.close()


def test_background_writer_reports_errors(tmp_path):
    from nri_cpumgr.checkpoint import BackgroundWriter

    (tmp_path / "file").write_text("")
    errors = []
    w = BackgroundWriter(lambda cp, e: errors.append((cp.path, type(e))))
    w.submit(Checkpoint(tmp_path / "file" / "state"), {"n": 1})  # parent is not a directory
    assert w.flush(5)
    w.close()
    assert errors and errors[0][0] == tmp_path / "file" / "state"


def test_background_writer_lingers_to_gather_a_burst(tmp_path, monkeypatch):
    import time

    from nri_cpumgr.checkpoint import BackgroundWriter

    writes = []
    real_save = Checkpoint.save
    monkeypatch.setattr(Checkpoint, "save", lambda self, b: (writes.append(b), real_save(self, b)))
    cp = Checkpoint(tmp_path / "state")
    w = BackgroundWriter(linger=0.3)
    w.submit(cp, {"n": 1})
    time.sleep(0.05)
    w.submit(cp, {"n": 2})
    w.submit(cp, {"n": 3})
    assert writes == []  # still lingering
    time.sleep(0.6)
    assert writes == [{"n": 3}]
    w.submit(cp, {"n": 4})
    assert w.flush(5)  # a flush does not wait for the linger
    assert writes[-1] == {"n": 4} and cp.load() == {"n": 4}
    w.close()


def test_save_makes_its_directory_again_when_it_went_away(tmp_path):
    import shutil

    cp = Checkpoint(tmp_path / "d" / "state")
    cp.save({"n": 1}, durable=False)
    shutil.rmtree(tmp_path / "d")
    cp.save({"n": 2}, durable=False)
    assert cp.load() == {"n": 2}


def test_flush_of_an_idle_writer_does_not_wake_its_thread(tmp_path):
    """A release writes before its reply after flushing the writer (ordering): with nothing
    pending the flush returns at once, without waking the writer thread."""
    from nri_cpumgr.checkpoint import BackgroundWriter

    cp = Checkpoint(tmp_path / "state")
    w = BackgroundWriter()
    w.submit(cp, {"n": 1})
    assert w.flush(5) and cp.load() == {"n": 1}
    woken = []
    real = w._cond.notify_all
    w._cond.notify_all = lambda: (woken.append(1), real())  # type: ignore[method-assign]
    assert w.flush(5)
    assert woken == []
    w.submit(cp, {"n": 2})  # pending again: the flush writes it and waits
    assert w.flush(5) and cp.load() == {"n": 2}
    w.close()



_ROW = {"id": "c1", "pod": "ns/p", "podUID": "u", "container": "app", "qos": "Guaranteed",
        "exclusive": True, "cpus": "2", "mems": "", "numa": "0", "stopped": False}


@pytest.mark.parametrize("change, why", [
    ({"policyName": 5}, "policyName: expected a string, got a number"),
    ({"defaultCpuSet": "zz"}, "defaultCpuSet: invalid cpulist 'zz'"),
    ({"defaultCpuSet": 7}, "defaultCpuSet: expected a cpulist string, got a number"),
    ({"reservedCpuSet": "1-0"}, "reservedCpuSet: invalid cpulist"),
    ({"entries": {"u": 5}}, "entries.u: expected a mapping, got a number"),
    ({"entries": {"u": {"app": "qq"}}}, "entries.u.app: invalid cpulist 'qq'"),
    ({"entries": []}, "entries: expected a mapping, got a list"),
    ({"containers": "x"}, "containers: expected a list, got a string"),
    ({"containers": [5]}, "containers[0]: expected a mapping, got a number"),
    ({"containers": [{"pod": "a"}]}, "containers[0]: id is missing"),
    ({"containers": [{**_ROW, "exclusive": "yes"}]},
     "containers[0].exclusive: expected a bool, got a string"),
    ({"containers": [_ROW, {**_ROW, "qos": "Gold"}]},
     "containers[1].qos: 'Gold' is not one of Guaranteed, Burstable, BestEffort"),
    ({"containers": [{**_ROW, "cpus": "x"}]}, "containers[0].cpus: invalid cpulist 'x'"),
    ({"admittedPods": []}, "admittedPods: expected a mapping, got a list"),
    ({"podPools": {"uid1": 5}}, "podPools.uid1: expected a mapping, got a number"),
    ({"podPools": {"uid1": {"cpus": 5}}}, "podPools.uid1: bubble is missing"),
    ({"podPools": {"uid1": {"bubble": "2", "podSharedPool": 5}}},
     "podPools.uid1.podSharedPool: expected a cpulist string, got a number"),
    ({"podPools": {"uid1": {"bubble": "2", "podSharedPool": "", "mems": "z"}}},
     "podPools.uid1.mems: invalid cpulist 'z'"),
    ({"resized": {"x": 5}}, "resized.x: expected a mapping, got a number"),
    ({"resized": {"u/app": {"from": "2", "to": "2"}}}, "resized.u/app: promised is missing"),
])
def test_a_cpu_state_with_a_right_checksum_and_wrong_fields_is_corrupt(tmp_path, change, why):
    """A body whose checksum is right but whose fields are not what the plugin writes is
    refused as a corrupt file is (CheckpointError naming the field), never a crash of its
    reader; the same body with the fields right is read back."""
    good = {"policyName": "static", "defaultCpuSet": "0-1,3", "reservedCpuSet": "0",
            "entries": {"u": {"app": "2"}}, "containers": [_ROW],
            "podPools": {"u": {"bubble": "2", "podSharedPool": "", "mems": "0"}},
            "resized": {"u/app": {"from": "2", "to": "2", "promised": "2"}}}
    cp = Checkpoint(tmp_path / "cpu_manager_state")
    cp.save(good)
    assert cp.load() == good
    cp.save({**good, **change})
    with pytest.raises(CheckpointError) as ei:
        cp.load()
    assert f"cpu_manager_state: malformed: {why}" in str(ei.value)


def test_other_bodies_are_not_held_to_the_cpu_state_shape(tmp_path):
    cp = Checkpoint(tmp_path / "memory_manager_state")
    cp.save({"policyName": "Static", "entries": 5})
    assert cp.load() == {"policyName": "Static", "entries": 5}
