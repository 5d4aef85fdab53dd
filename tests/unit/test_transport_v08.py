"""NRI v0.8 and v0.10 behaviour of the plugin stub, against the in-process fake runtime.

v0.8 (containerd 2.0/2.1): Configure carries ``registration_timeout`` / ``request_timeout`` in
milliseconds (nri pkg/adaptation/plugin.go ``configure``); the stub logs them and warns when a
handler uses more than half of the request budget (2000 ms, NRI's default, when absent).
v0.10 (containerd 2.2): per-event methods are tried first and must answer Unimplemented (12)
so that the runtime falls back to StateChange on the same connection; events 12-14 are never
requested (v0.6.1 refuses unknown bits). Split Synchronize is in test_transport_stub.py.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.transport import stub as stub_mod
from nri_cpumgr.transport.stub import DEFAULT_EVENTS, DEFAULT_REQUEST_TIMEOUT_MS, event_mask

from .nri_peer import RecordingHandlers
from .test_transport_stub import ctr, pod, run_scenario, until

LOGGER = "test.nri.v08"




def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == level]


def _budget_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [m for m in _records(caplog, logging.WARNING) if "request timeout" in m]


async def _configure(conn, **kw) -> nri_pb2.ConfigureResponse:
    req = nri_pb2.ConfigureRequest(runtime_name="containerd", runtime_version="v2.1.9", **kw)
    return await conn.call("Configure", req, nri_pb2.ConfigureResponse)


async def _register(conn) -> None:
    await until(lambda: conn.registered.done())


def test_v08_configure_timeouts_logged_and_kept(sock_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def body(rt, stub, conn, h):
        await _register(conn)
        resp = await _configure(conn, registration_timeout=5000, request_timeout=1500)
        assert resp.events == DEFAULT_EVENTS
        assert (stub.registration_timeout_ms, stub.request_timeout_ms) == (5000, 1500)
        assert stub.request_budget_ms == 1500
        # the handler sees the whole request, timeouts included
        assert (h.configs[0].registration_timeout, h.configs[0].request_timeout) == (5000, 1500)

    run_scenario(sock_path, body, logger=logging.getLogger(LOGGER))
    infos = _records(caplog, logging.INFO)
    line = next(m for m in infos if "configured by" in m)
    assert "containerd v2.1.9" in line
    assert "registration timeout 5000 ms" in line and "request timeout 1500 ms" in line


def test_v061_configure_without_timeouts_uses_default_budget(sock_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def body(rt, stub, conn, h):
        await _register(conn)
        await _configure(conn)
        assert (stub.registration_timeout_ms, stub.request_timeout_ms) == (0, 0)
        assert stub.request_budget_ms == DEFAULT_REQUEST_TIMEOUT_MS == 2000

    run_scenario(sock_path, body, logger=logging.getLogger(LOGGER))
    line = next(m for m in _records(caplog, logging.INFO) if "configured by" in m)
    assert "assumed 2000 ms" in line


def test_slow_handler_over_half_the_budget_warns(sock_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    h0 = RecordingHandlers()
    delay: list[float] = [0.0]
    h0.on_create = lambda: time.sleep(delay[0])
    req = nri_pb2.CreateContainerRequest(pod=pod(1), container=ctr(1))

    async def body(rt, stub, conn, h):
        await _register(conn)
        await _configure(conn, registration_timeout=5000, request_timeout=200)
        await conn.call("Synchronize", nri_pb2.SynchronizeRequest(), nri_pb2.SynchronizeResponse)
        delay[0] = 0.02  # 20 ms: well under half of 200 ms
        await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert _budget_warnings(caplog) == []
        delay[0] = 0.15  # 150 ms > 100 ms: answered, but warned
        resp = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert resp == nri_pb2.CreateContainerResponse()
        assert stub.registered

    run_scenario(sock_path, body, handlers=h0, logger=logging.getLogger(LOGGER))
    warnings = _budget_warnings(caplog)
    assert len(warnings) == 1
    msg = warnings[0]
    assert msg.startswith("NRI: CreateContainer took ")
    ms = int(msg.split("took ")[1].split(" ms")[0])
    assert 150 <= ms < 1000
    assert "200 ms request timeout" in msg


def test_default_budget_applies_without_configured_timeout(sock_path: Path, caplog) -> None:
    """Without request_timeout the budget is 2000 ms: 150 ms is no warning, 1100 ms is."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    h0 = RecordingHandlers()
    delay: list[float] = [0.15]
    h0.on_create = lambda: time.sleep(delay[0])
    req = nri_pb2.CreateContainerRequest(pod=pod(1), container=ctr(1))

    async def body(rt, stub, conn, h):
        await conn.handshake()
        await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert _budget_warnings(caplog) == []
        delay[0] = 1.1
        await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)

    run_scenario(sock_path, body, handlers=h0, logger=logging.getLogger(LOGGER))
    (msg,) = _budget_warnings(caplog)
    assert msg.startswith("NRI: CreateContainer took ") and "2000 ms request timeout" in msg


class _Clock:
    """A perf_counter that advances ``step`` seconds per reading."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now


def test_split_synchronize_parts_share_one_budget(sock_path: Path, caplog,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A split sync runs under one deadline for all parts: 4 parts of 30 ms each (as the stub
    measures them) exceed half of a 200 ms budget although no single part does."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = _Clock(0.03)  # two readings per request: 30 ms each
    monkeypatch.setattr(stub_mod, "time", clock)

    async def body(rt, stub, conn, h):
        await _register(conn)
        await _configure(conn, registration_timeout=5000, request_timeout=200)
        for i in range(3):
            part = await conn.call("Synchronize", nri_pb2.SynchronizeRequest(
                pods=[pod(i)], containers=[ctr(i)], more=True), nri_pb2.SynchronizeResponse)
            assert part.more and list(part.update) == []
            assert _budget_warnings(caplog) == []
        last = await conn.call("Synchronize", nri_pb2.SynchronizeRequest(pods=[pod(3)]),
                               nri_pb2.SynchronizeResponse)
        assert not last.more
        assert h.syncs == [(["pod0", "pod1", "pod2", "pod3"], ["ctr0", "ctr1", "ctr2"])]
        (msg,) = _budget_warnings(caplog)
        assert msg.startswith("NRI: Synchronize took 120 ms")
        # the next (unsplit) sync starts from zero
        await conn.call("Synchronize", nri_pb2.SynchronizeRequest(), nri_pb2.SynchronizeResponse)
        assert len(_budget_warnings(caplog)) == 1

    run_scenario(sock_path, body, logger=logging.getLogger(LOGGER))
    infos = _records(caplog, logging.INFO)
    assert sum("synchronize part" in m for m in infos) == 3
    assert any("synchronize with 4 pods, 3 containers" in m and "in 4 parts" in m
               for m in infos)


V010_METHODS = [
    ("RunPodSandbox", nri_pb2.StateChangeEvent(event=nri_pb2.RUN_POD_SANDBOX, pod=pod(1))),
    ("UpdatePodSandbox", nri_pb2.StateChangeEvent(pod=pod(1))),
    ("PostUpdatePodSandbox", nri_pb2.StateChangeEvent(pod=pod(1))),
    ("StopPodSandbox", nri_pb2.StateChangeEvent(event=nri_pb2.STOP_POD_SANDBOX, pod=pod(1))),
    ("StartContainer", nri_pb2.StateChangeEvent(event=nri_pb2.START_CONTAINER, pod=pod(1),
                                                container=ctr(1))),
    ("PostCreateContainer", nri_pb2.StateChangeEvent(pod=pod(1), container=ctr(1))),
    ("PostStartContainer", nri_pb2.StateChangeEvent(pod=pod(1), container=ctr(1))),
    ("PostUpdateContainer", nri_pb2.StateChangeEvent(pod=pod(1), container=ctr(1))),
    ("ValidateContainerAdjustment", nri_pb2.StateChangeEvent(pod=pod(1), container=ctr(1))),
    ("RemoveContainer", nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=pod(1),
                                                 container=ctr(1))),
    ("RemovePodSandbox", nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_POD_SANDBOX,
                                                  pod=pod(1))),
]


def test_v010_runtime_falls_back_to_state_change(sock_path: Path) -> None:
    """What a v0.10 runtime does: subscribe with events 12-14 offered, try each per-event
    method, get Unimplemented, deliver the event through StateChange on the same connection."""
    v010_events = event_mask(12, 13, 14)

    async def body(rt, stub, conn, h):
        await _register(conn)
        resp = await _configure(conn, registration_timeout=5000, request_timeout=2000)
        assert resp.events == DEFAULT_EVENTS and resp.events & v010_events == 0
        assert resp.events <= 0x7FF
        await conn.call("Synchronize", nri_pb2.SynchronizeRequest(), nri_pb2.SynchronizeResponse)
        delivered = []
        for method, ev in V010_METHODS:
            raw = await conn.call_raw(method, ev.SerializeToString())
            assert (raw.status.code, raw.payload) == (12, b""), method
            assert method in raw.status.message
            if ev.event:  # the fallback: the same event as StateChange
                out = await conn.call("StateChange", ev, nri_pb2.Empty)
                assert out == nri_pb2.Empty()
                delivered.append(ev.event)
        assert h.events == delivered == [
            nri_pb2.RUN_POD_SANDBOX, nri_pb2.STOP_POD_SANDBOX, nri_pb2.START_CONTAINER,
            nri_pb2.REMOVE_CONTAINER, nri_pb2.REMOVE_POD_SANDBOX]
        # one connection throughout, still registered and serving
        assert stub.registered and stub.sessions == 1 and not conn.closed.done()
        assert ("eof",) not in conn.log
        ok = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=pod(2), container=ctr(2)), nri_pb2.CreateContainerResponse)
        assert ok == nri_pb2.CreateContainerResponse()

    run_scenario(sock_path, body, events=DEFAULT_EVENTS | v010_events)
