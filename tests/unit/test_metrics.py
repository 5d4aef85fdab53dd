"""nri_cpumgr.metrics: the recorded values, the exposition, and the HTTP endpoint over a real
socket."""

from __future__ import annotations

import http.client
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from nri_cpumgr.metrics import ADMISSION_BUCKETS_MS, Metrics, parse_address

KUBELET_NAMES = (
    "cpu_manager_pinning_requests_total",
    "cpu_manager_pinning_errors_total",
    "cpu_manager_shared_pool_size_millicores",
    "cpu_manager_exclusive_cpu_allocation_count",
    "topology_manager_admission_requests_total",
    "topology_manager_admission_errors_total",
    "topology_manager_admission_duration_ms_count",
    "memory_manager_pinning_requests_total",
    "memory_manager_pinning_errors_total",
)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _get(port: int, path: str, method: str = "GET") -> tuple[int, bytes, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.getheader("Content-Type") or ""
    finally:
        conn.close()


def test_counters_and_gauges_move():
    m = Metrics(version="1.2.3")
    for name in KUBELET_NAMES:
        assert m.value(name) == 0, name
    m.pinning(True)
    m.pinning(True)
    m.pinning(False)
    assert m.value("cpu_manager_pinning_requests_total") == 3
    assert m.value("cpu_manager_pinning_errors_total") == 1
    m.memory_pinning(False)
    assert m.value("memory_manager_pinning_requests_total") == 1
    assert m.value("memory_manager_pinning_errors_total") == 1
    m.set_pools(1000, 1)
    assert m.value("cpu_manager_shared_pool_size_millicores") == 1000
    assert m.value("cpu_manager_exclusive_cpu_allocation_count") == 1
    m.set_pools(2000, 0)
    assert m.value("cpu_manager_shared_pool_size_millicores") == 2000
    assert m.value("cpu_manager_exclusive_cpu_allocation_count") == 0
    m.connection(True, False)
    assert (m.value("nri_cpumgr_nri_connected"), m.value("nri_cpumgr_nri_registered")) == (1, 0)
    m.connection(True, True)
    assert m.value("nri_cpumgr_nri_registered") == 1
    m.connection(False, False)
    assert (m.value("nri_cpumgr_nri_connected"), m.value("nri_cpumgr_nri_registered")) == (0, 0)
    assert m.value("nri_cpumgr_build_info", {"version": "1.2.3"}) == 1


def test_admission_histogram_uses_the_kubelet_ms_buckets():
    # kubelet: ExponentialBuckets(.05, 2, 15) -> 0.05, 0.1, ..., 819.2 ms
    assert len(ADMISSION_BUCKETS_MS) == 15
    assert ADMISSION_BUCKETS_MS[0] == pytest.approx(0.05)
    assert ADMISSION_BUCKETS_MS[-1] == pytest.approx(819.2)
    m = Metrics()
    m.admission(True, 0.07)
    m.admission(False, 3.0)
    assert m.value("topology_manager_admission_requests_total") == 2
    assert m.value("topology_manager_admission_errors_total") == 1
    assert m.value("topology_manager_admission_duration_ms_count") == 2
    assert m.value("topology_manager_admission_duration_ms_sum") == pytest.approx(3.07)
    le = lambda b: m.value("topology_manager_admission_duration_ms_bucket", {"le": b})  # noqa: E731
    assert le("0.05") == 0 and le("0.1") == 1 and le("3.2") == 2


def test_request_histogram_by_method_fine_below_one_ms():
    m = Metrics()
    m.observe_request("CreateContainer", 0.0003)
    m.observe_request("CreateContainer", 0.0004)
    m.observe_request("Synchronize", 1.5)
    cc = {"method": "CreateContainer"}
    assert m.value("nri_cpumgr_nri_request_duration_seconds_count", cc) == 2
    assert m.value("nri_cpumgr_nri_request_duration_seconds_bucket",
                   {**cc, "le": "0.00025"}) == 0
    assert m.value("nri_cpumgr_nri_request_duration_seconds_bucket",
                   {**cc, "le": "0.0005"}) == 2
    sy = {"method": "Synchronize"}
    assert m.value("nri_cpumgr_nri_request_duration_seconds_bucket", {**sy, "le": "1.0"}) == 0
    assert m.value("nri_cpumgr_nri_request_duration_seconds_bucket", {**sy, "le": "2.0"}) == 1


def test_registries_are_private():
    a, b = Metrics(), Metrics()
    a.pinning(True)
    assert a.value("cpu_manager_pinning_requests_total") == 1
    assert b.value("cpu_manager_pinning_requests_total") == 0


def test_exposition_has_every_name_and_parses():
    m = Metrics()
    m.pinning(True)
    m.admission(True, 1.0)
    m.observe_request("CreateContainer", 0.001)
    body, ctype = m.exposition()
    assert ctype.startswith("text/plain")
    text = body.decode()
    for name in KUBELET_NAMES + ("nri_cpumgr_nri_connected", "nri_cpumgr_nri_registered",
                                 "nri_cpumgr_nri_request_duration_seconds_bucket"):
        assert f"\n{name}" in text, name
    assert "# TYPE topology_manager_admission_duration_ms histogram" in text
    assert "# TYPE cpu_manager_shared_pool_size_millicores gauge" in text
    samples = _samples(text)
    assert samples[("cpu_manager_pinning_requests_total", ())] == 1
    assert samples[("nri_cpumgr_nri_request_duration_seconds_count",
                    (("method", "CreateContainer"),))] == 1


def test_hot_path_is_cheap():
    m = Metrics()
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        m.observe_request("CreateContainer", 0.0002)
        m.pinning(True)
        m.set_pools(1000, 1)
        m.admission(True, 0.1)
    per_call = (time.perf_counter() - t0) / (4 * n)
    assert per_call < 10e-6, f"{per_call * 1e6:.2f} us per call"
    assert m.value("cpu_manager_pinning_requests_total") == n


@pytest.mark.parametrize(("address", "expect"), [
    (":9109", ("", 9109)), ("127.0.0.1:0", ("127.0.0.1", 0)), ("[::1]:80", ("::1", 80)),
])
def test_parse_address(address, expect):
    assert parse_address(address) == expect


@pytest.mark.parametrize("address", ["9109", "host:", "host:http", ":70000"])
def test_parse_address_rejects(address):
    with pytest.raises(ValueError):
        parse_address(address)


def test_http_endpoints_over_a_real_socket():
    m = Metrics()
    state = {"ready": False}
    with m.serve("127.0.0.1:0", lambda: state["ready"]) as srv:
        assert srv.port > 0
        code, body, _ = _get(srv.port, "/healthz")
        assert (code, body) == (200, b"ok\n")
        code, _, _ = _get(srv.port, "/readyz")
        assert code == 503
        state["ready"] = True
        code, _, _ = _get(srv.port, "/readyz")
        assert code == 200

        m.pinning(True)
        m.pinning(False)
        code, body, ctype = _get(srv.port, "/metrics")
        assert code == 200 and ctype.startswith("text/plain")
        samples = _samples(body.decode())
        assert samples[("cpu_manager_pinning_requests_total", ())] == 2
        assert samples[("cpu_manager_pinning_errors_total", ())] == 1
        m.pinning(True)
        samples = _samples(_get(srv.port, "/metrics")[1].decode())
        assert samples[("cpu_manager_pinning_requests_total", ())] == 3

        code, body, _ = _get(srv.port, "/readyz", "HEAD")
        assert (code, body) == (200, b"")
        assert _get(srv.port, "/nope")[0] == 404
        port = srv.port
    with pytest.raises(OSError):
        _get(port, "/healthz")


def test_readyz_is_503_when_the_check_raises():
    def broken() -> bool:
        raise RuntimeError("boom")

    with Metrics().serve("127.0.0.1:0", broken) as srv:
        assert _get(srv.port, "/readyz")[0] == 503
        assert _get(srv.port, "/healthz")[0] == 200


def test_serve_refuses_a_busy_port():
    with Metrics().serve("127.0.0.1:0", lambda: True) as srv, pytest.raises(OSError):
        # allow_reuse_address does not allow two listeners on one port
        Metrics().serve(f"127.0.0.1:{srv.port}", lambda: True)


def test_readyz_503_carries_the_reason_the_check_gives():
    """A str from ready() is not-ready with that reason (a refused runtime config)."""
    with Metrics().serve("127.0.0.1:0", lambda: "config refused: reservedSystemCpus") as srv:
        code, body, _ = _get(srv.port, "/readyz")
        assert code == 503
        assert body == b"config refused: reservedSystemCpus\n"


def test_a_bracketed_ipv6_address_is_listened_on():
    import urllib.request

    from nri_cpumgr.metrics.server import MetricsServer

    class _Expo:
        def exposition(self, accept: str) -> tuple[bytes, str]:
            return b"x 1\n", "text/plain"

    s = MetricsServer(_Expo(), "[::1]:0", lambda: True)
    try:
        assert s.host == "::1"
        with urllib.request.urlopen(f"http://[::1]:{s.port}/healthz", timeout=10) as r:
            assert r.status == 200
    finally:
        s.close()
