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


def test_a_file_as_written_is_checked_on_its_text_and_any_other_layout_on_its_body(
        tmp_path, monkeypatch):
    """A version-2 file laid out as save writes it is checked by the CRC-32 of its body's
    text as written (no encoding of the parsed body again: a restart's load, issue 34);
    the same body in another layout (another tool's formatting, its keys reordered) is
    checked on the parsed body, and accepted when right; a wrong checksum fails either way.
    """
    from nri_cpumgr.checkpoint import store

    cp = Checkpoint(tmp_path / "state")
    body = {"policyName": "static", "defaultCpuSet": "0,2-3", "entries": {"u": {"c": "1"}},
            "containers": [json.loads(ROW)], "note": "caf\u00e9 \u00e0 \"quoted\""}
    cp.save(body)
    saved = cp.path.read_bytes()
    encoded: list[object] = []
    real = store.checksum
    monkeypatch.setattr(store, "checksum", lambda b, v=2: encoded.append(b) or real(b, v))
    assert cp.load() == body and encoded == []
    doc = json.loads(cp.path.read_bytes())
    for layout in (json.dumps(doc, indent=2).encode(),
                   json.dumps({"data": doc["data"], "version": 2,
                               "checksum": doc["checksum"]}).encode() + b"\n"):
        cp.path.write_bytes(layout)
        assert cp.load() == body and len(encoded) == 1
        encoded.clear()
    wrong = json.dumps(dict(doc, checksum=doc["checksum"] ^ 1)).encode() + b"\n"
    for raw in (wrong, saved.replace(b'"0,2-3"', b'"0,2-4"')):
        cp.path.write_bytes(raw)
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


def test_the_crc_of_pieces_keeps_long_pieces_and_equals_zlibs(monkeypatch):
    """crc32_pieces is zlib's CRC-32 of the joined pieces; a long piece seen again (the same
    object) is not read again: its CRC is combined, and a changed piece is read anew."""
    import os
    import zlib

    from nri_cpumgr.checkpoint import store

    long1 = os.urandom(store.KEEP_CRC_OF + 123)
    long2 = os.urandom(3 * store.KEEP_CRC_OF)
    read: list[int] = []
    real = zlib.crc32
    monkeypatch.setattr(zlib, "crc32", lambda data, crc=0: (read.append(len(data)),
                                                             real(data, crc))[1])
    for pieces in ([b'{"containers":[', b"x" * 7, long1, b"]}"], [long1], [b"", long2, b"a"],
                   [long2, long1], [], [b"abc"]):
        assert store.crc32_pieces(pieces) == real(b"".join(pieces))
    assert read.count(len(long1)) == 1 and read.count(len(long2)) == 1
    other = bytearray(long1)
    other[-1] ^= 1
    assert store.crc32_pieces([b"p", bytes(other)]) == real(b"p" + bytes(other))
    assert read.count(len(long1)) == 2
    # the operator over n bytes is x^(8n) mod P: combining with it is crc32_combine
    for n in (0, 1, 5, 4096, 130_000):
        a, b = os.urandom(17), os.urandom(n)
        assert store._multmodp(store._x8nmodp(n), real(a)) ^ real(b) == real(a + b)


def test_a_write_that_is_not_durable_swaps_the_new_file_in(tmp_path, monkeypatch):
    """durable=False: the temp file (the previous checkpoint, kept under that name) written
    over in place, cut to its new length and exchanged with the checkpoint (renameat2); a
    rename where there is no file yet or no exchange; a durable write renames as before."""
    from nri_cpumgr.checkpoint import store

    cp = Checkpoint(tmp_path / "state")
    calls: list[tuple[str, str]] = []
    real = store._exchange
    monkeypatch.setattr(store, "_exchange", lambda a, b: (calls.append((a, b)), real(a, b))[1])
    replaced: list[str] = []
    real_replace = store.os.replace
    monkeypatch.setattr(store.os, "replace",
                        lambda a, b: (replaced.append(a), real_replace(a, b))[1])
    long_body = {"n": 1, "pad": "x" * 5000}
    cp.save(long_body, durable=False)  # no file yet: the exchange fails, a rename
    assert replaced == [cp._tmp] and calls == [(cp._tmp, cp.file)]
    first = cp.path.stat().st_ino
    cp.save({"n": 2}, durable=False)
    assert cp.load() == {"n": 2} and replaced == [cp._tmp] and len(calls) == 2
    second = cp.path.stat().st_ino
    assert second != first
    tmp = tmp_path / ".state.tmp"
    assert tmp.stat().st_ino == first and json.loads(tmp.read_bytes())["data"] == long_body
    cp.save({"n": 3}, durable=False)  # written over the first file, shorter than it was
    assert cp.load() == {"n": 3} and cp.path.stat().st_ino == first
    assert cp.path.stat().st_size < 1000 and tmp.stat().st_ino == second
    tmp.write_bytes(b"torn" * 3000)  # a dead process's half-written temp file
    cp.save({"n": 4}, durable=False)
    assert cp.load() == {"n": 4} and len(replaced) == 1
    cp.save({"n": 5})  # durable: temp file, fsync, rename
    assert cp.load() == {"n": 5} and len(replaced) == 2 and not tmp.exists()
    monkeypatch.setattr(store, "_renameat2", False)  # (no renameat2 here)
    cp.save({"n": 6}, durable=False)
    assert cp.load() == {"n": 6} and len(replaced) == 3 and not tmp.exists()


def test_the_exchange_swaps_or_says_it_did_not(tmp_path, monkeypatch):
    """renameat2 RENAME_EXCHANGE swaps two paths; a missing one or another error is False
    (the caller's rename then raises what is wrong), and an exchange refused as unsupported
    is not tried again."""
    from nri_cpumgr.checkpoint import store

    (tmp_path / "a").write_text("a")
    (tmp_path / "b").write_text("b")
    assert store._exchange(str(tmp_path / "a"), str(tmp_path / "b")) is True
    assert (tmp_path / "a").read_text() == "b" and (tmp_path / "b").read_text() == "a"
    assert store._exchange(str(tmp_path / "x"), str(tmp_path / "b")) is False  # ENOENT
    assert store._exchange(str(tmp_path / "a"), str(tmp_path / "a" / "b")) is False  # ENOTDIR
    assert store._renameat2 not in (None, False)  # (still tried)
    calls: list[bytes] = []

    def refused(*args: object) -> int:  # a seccomp profile without renameat2: EPERM
        import ctypes

        calls.append(args[1])  # type: ignore[arg-type]
        ctypes.set_errno(1)
        return -1

    monkeypatch.setattr(store, "_renameat2", refused)
    assert store._exchange(str(tmp_path / "a"), str(tmp_path / "b")) is False
    assert store._renameat2 is False and len(calls) == 1
    cp = Checkpoint(tmp_path / "state")
    cp.save({"n": 1}, durable=False)
    cp.save({"n": 2}, durable=False)
    assert cp.load() == {"n": 2} and len(calls) == 1


def test_a_short_write_in_place_is_completed(tmp_path, monkeypatch):
    from nri_cpumgr.checkpoint import store

    cp = Checkpoint(tmp_path / "state")
    cp.save({"n": 1, "pad": "y" * 300}, durable=False)
    cp.save({"n": 2}, durable=False)
    real = store.os.pwritev
    monkeypatch.setattr(store.os, "pwritev", lambda fd, parts, off: real(fd, [parts[0][:5]], off))
    body = {"policyName": "static", "defaultCpuSet": "0-3", "entries": {"u": {"c": "1"}}}
    cp.save(body, durable=False)
    assert cp.load() == body
