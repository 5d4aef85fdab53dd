"""Unit tests of Memory Manager configuration and quantities (memory_manager.go
getSystemReservedMemory / validateReservedMemory, apimachinery Quantity.String)."""

from __future__ import annotations

import pytest

from nri_cpumgr.cm.memorymanager import errors
from nri_cpumgr.cm.memorymanager.config import (
    MemoryReservation,
    get_system_reserved_memory,
    new_manager,
    validate_reserved_memory,
)
from nri_cpumgr.cm.memorymanager.policy_none import NonePolicy
from nri_cpumgr.cm.memorymanager.quantity import (
    Quantity,
    QuantityFormat,
    canonical_string,
    hugepage_resource_name,
)
from nri_cpumgr.topology import NUMANodeInfo

GB = 1 << 30
MACHINE = [NUMANodeInfo(id=0, memory_bytes=8 * GB), NUMANodeInfo(id=1, memory_bytes=8 * GB)]


@pytest.mark.parametrize(
    ("value", "fmt", "text"),
    [
        (0, QuantityFormat.BINARY_SI, "0"),
        (77, QuantityFormat.BINARY_SI, "77"),  # below 1024: shown as DecimalSI
        (1536, QuantityFormat.BINARY_SI, "1536"),
        (3 * GB, QuantityFormat.BINARY_SI, "3Gi"),
        (2 << 20, QuantityFormat.BINARY_SI, "2Mi"),
        (12000, QuantityFormat.DECIMAL_SI, "12k"),
        (1200, QuantityFormat.DECIMAL_SI, "1200"),
        (5 * 10**9, QuantityFormat.DECIMAL_SI, "5G"),
        (3000, QuantityFormat.DECIMAL_EXPONENT, "3e3"),
    ],
)
def test_canonical_string(value: int, fmt: QuantityFormat, text: str) -> None:
    assert canonical_string(value, fmt) == text


def test_quantity_sum_keeps_first_nonzero_format() -> None:
    total = Quantity(0) + Quantity.parse("1Gi") + Quantity.parse("2Gi")
    assert str(total) == "3Gi"
    assert str(Quantity.parse("1G") + Quantity.parse("1Gi")) == "2073741824"
    assert Quantity.parse("1e3") == Quantity(1000, QuantityFormat.DECIMAL_EXPONENT)


def test_hugepage_resource_names() -> None:
    assert hugepage_resource_name(2 << 20) == "hugepages-2Mi"
    assert hugepage_resource_name(GB) == "hugepages-1Gi"
    assert hugepage_resource_name(64 << 10) == "hugepages-64Ki"


def test_get_system_reserved_memory_converts_every_node() -> None:
    got = get_system_reserved_memory(
        MACHINE,
        {"memory": "1536Mi", "cpu": "1"},  # cpu is not a memory type: ignored
        [MemoryReservation(0, {"memory": "1Gi"}), MemoryReservation(1, {"memory": "512Mi"})],
    )
    assert got == {0: {"memory": GB}, 1: {"memory": GB // 2}}


def test_get_system_reserved_memory_reports_missing_reservation_type() -> None:
    with pytest.raises(errors.ReservedMemoryMismatchError) as info:
        get_system_reserved_memory(
            MACHINE,
            {"memory": "1Gi", "hugepages-2Mi": "4Mi"},
            [MemoryReservation(0, {"memory": "1Gi"})],
        )
    e = info.value
    assert (e.resource, e.total, e.node_allocatable) == ("hugepages-2Mi", "0", "4Mi")
    assert (e.total_bytes, e.node_allocatable_bytes) == (0, 4 << 20)


def test_validate_rejects_unknown_numa_node_before_sums() -> None:
    with pytest.raises(errors.ReservedMemoryUnknownNUMANodeError) as info:
        validate_reserved_memory(MACHINE, {}, [MemoryReservation(3, {"memory": "1Gi"})])
    assert info.value.numa_node == 3


def test_new_manager_none_needs_no_reservation() -> None:
    mgr = new_manager("None", MACHINE, {}, [])
    assert isinstance(mgr.policy, NonePolicy)
    mgr.start()
    assert mgr.get_allocatable_memory() == []


def test_new_manager_static_start_builds_default_state() -> None:
    mgr = new_manager(
        "Static", MACHINE, {"memory": "2Gi"}, [MemoryReservation(0, {"memory": "2Gi"})]
    )
    mgr.start()
    ms = mgr.state.get_machine_state()
    assert ms[0].memory_map["memory"].allocatable == 6 * GB
    assert ms[1].memory_map["memory"].allocatable == 8 * GB
    assert [(b.numa_affinity, b.size) for b in mgr.get_allocatable_memory()] == [
        ((0,), 6 * GB),
        ((1,), 8 * GB),
    ]


def test_get_system_reserved_memory_without_reservation_lists_every_node() -> None:
    """kubelet TestGetSystemReservedMemory "Should return empty map when reservation is not
    done"."""
    assert get_system_reserved_memory(MACHINE, {}, []) == {0: {}, 1: {}}


def test_get_system_reserved_memory_reservation_without_node_allocatable() -> None:
    """kubelet TestGetSystemReservedMemory "Should return error when Allocatable reservation
    is not equal to the reserved memory"."""
    with pytest.raises(errors.ReservedMemoryMismatchError) as info:
        get_system_reserved_memory(MACHINE, {}, [MemoryReservation(0, {"memory": GB})])
    assert str(info.value) == (
        'the total amount "1073741824" of type "memory" is not equal to the value "0" '
        "determined by Node Allocatable feature"
    )
    with pytest.raises(errors.ReservedMemoryMismatchError) as info:
        get_system_reserved_memory(MACHINE, {}, [MemoryReservation(0, {"memory": "1Gi"})])
    assert info.value.total == "1Gi"
