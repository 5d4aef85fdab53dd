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
        (lambda raw: raw.replace(b'"version": 1', b'"version": 9'), "unknown version"),
        (lambda raw: b"[]", "missing data"),
        (lambda raw: b"\xff\xfe", "not JSON"),
    ],
)
def test_corrupt_checkpoint_is_a_clear_error(tmp_path, mutate, reason):
    cp = Checkpoint(tmp_path / "state")
    cp.save({"defaultCpuSet": "0,2-3"})
    raw = cp.path.read_bytes()
    assert json.loads(raw)["version"] == 1
    cp.path.write_bytes(mutate(raw))
    with pytest.raises(CheckpointError, match=reason) as ei:
        cp.load()
    assert str(cp.path) in str(ei.value)


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
