"""Pods and containers as the resource managers see them.

Resources use the kubelet's units: CPU in millicores (1 CPU = 1000), memory and hugepages in
bytes. ``None`` means "not set" (no request / no limit). The runtime glue builds these from
NRI requests; the conformance tests build them from Kubernetes quantity strings.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nri_cpumgr.frozen import slot_init


class QOSClass(enum.StrEnum):
    """Kubernetes pod QoS classes (k8s.io/api core/v1 PodQOSClass)."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BESTEFFORT = "BestEffort"


#: ``QOSClass.GUARANTEED`` for the per-container paths: on Python 3.11 a class attribute of an
#: enum goes through ``EnumType.__getattr__`` (~90 ns a lookup; gone in 3.12)
GUARANTEED = QOSClass.GUARANTEED


@slot_init
@dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class ContainerSpec:
    """One container's resources.

    ``requests`` / ``limits`` map a resource name (``"cpu"`` in millicores, ``"memory"`` and
    ``"hugepages-<size>"`` in bytes, anything else as an integer count) to its amount.
    ``restartable`` marks an init container with ``restartPolicy: Always`` (a sidecar).
    """

    name: str
    requests: Mapping[str, int] = field(default_factory=dict)
    limits: Mapping[str, int] = field(default_factory=dict)
    restartable: bool = False

    def request(self, resource: str) -> int | None:
        """The effective request: the request, else the limit (a limit alone implies an
        equal request, as the API server defaults it)."""
        v = self.requests.get(resource)
        return v if v is not None else self.limits.get(resource)

    @property
    def cpu_request_milli(self) -> int | None:
        return self.request("cpu")

    def guaranteed_cpus(self) -> int:
        """Exclusive CPUs this container asks for when its pod is Guaranteed: the CPU request
        in whole CPUs if it is an integer, else 0 (kubelet policy_static.go,
        guaranteedCPUs)."""
        m = self.requests.get("cpu")  # (request("cpu"), one call less per admission)
        if m is None:
            m = self.limits.get("cpu")
        if m is None or m <= 0 or m % 1000:
            return 0
        return m // 1000

    def equivalent_guaranteed(self) -> bool:
        """Its own cpu and memory requests are set, non-zero and equal to its own limits: what
        the kubelet asks of a container of a pod with ``.spec.resources`` before its managers
        pin it (cm/qos IsContainerEquivalentQOSGuaranteed, v1.37.2)."""
        for r in ("cpu", "memory"):
            req, lim = self.requests.get(r), self.limits.get(r)
            if not req or req != lim:
                return False
        return True


@slot_init
@dataclass(frozen=True, slots=True, init=False)  # (its __init__: slot_init's)
class Pod:
    """A pod: uid, name/namespace, its init and app containers as far as they are known.

    ``qos`` is set when it is known from outside (for example from the kubelet's cgroup
    parent); otherwise :func:`pod_qos` derives it from the containers.
    ``pod_level_resources``: the pod sets ``.spec.resources`` and the pod-level resource
    managers are on (``PodLevelResources`` + ``PodLevelResourceManagers``), so its containers
    are seen with their own resources and pinned only when
    :meth:`ContainerSpec.equivalent_guaranteed` (kubelet v1.37.2).
    """

    uid: str
    name: str = ""
    namespace: str = ""
    containers: tuple[ContainerSpec, ...] = ()
    init_containers: tuple[ContainerSpec, ...] = ()
    qos: QOSClass | None = None
    pod_level_resources: bool = False

    def container(self, name: str) -> ContainerSpec | None:
        """The container called ``name``, init containers first (None when absent)."""
        for c in self.init_containers:
            if c.name == name:
                return c
        for c in self.containers:
            if c.name == name:
                return c
        return None

    def is_init_container(self, name: str) -> bool:
        return any(c.name == name for c in self.init_containers)

    def qos_class(self) -> QOSClass:
        return self.qos if self.qos is not None else pod_qos(self)


_COMPUTE = ("cpu", "memory")


def pod_qos(pod: Pod) -> QOSClass:
    """The pod's QoS class from its containers' requests and limits.

    Rule (kubelet pkg/apis/core/helper/qos GetPodQOS, Kubernetes docs "Pod Quality of Service
    Classes"): BestEffort if no container sets a cpu or memory request or limit; Guaranteed if
    every container (init included) has cpu and memory limits and, where requests are set,
    they equal the limits; Burstable otherwise. Only cpu and memory count.
    """
    any_set = False
    guaranteed = True
    for c in pod.init_containers + pod.containers:
        for r in _COMPUTE:
            req, lim = c.requests.get(r), c.limits.get(r)
            if (req is not None and req != 0) or (lim is not None and lim != 0):
                any_set = True
            if lim is None or lim == 0:
                guaranteed = False
            elif req is not None and req != lim:
                guaranteed = False
    if not any_set:
        return QOSClass.BESTEFFORT
    return QOSClass.GUARANTEED if guaranteed else QOSClass.BURSTABLE


#: suffix -> (multiplier, divisor)
_SUFFIX = {
    "": (1, 1),
    "n": (1, 10**9),
    "u": (1, 10**6),
    "m": (1, 1000),
    "k": (10**3, 1),
    "M": (10**6, 1),
    "G": (10**9, 1),
    "T": (10**12, 1),
    "P": (10**15, 1),
    "E": (10**18, 1),
    "Ki": (2**10, 1),
    "Mi": (2**20, 1),
    "Gi": (2**30, 1),
    "Ti": (2**40, 1),
    "Pi": (2**50, 1),
    "Ei": (2**60, 1),
}
#: resource.Quantity's grammar (k8s.io/apimachinery pkg/api/resource quantity.go, v0.37.2):
#: ``<signedNumber><suffix>``, the suffix a binary SI one (Ki..Ei), a decimal SI one (n..E,
#: or none) or a decimal exponent (e/E and a signed integer), never two of them ("1e3Mi"),
#: and no blanks (ParseQuantity refuses " 2 "; Quantity.UnmarshalJSON trims its JSON string
#: first: :func:`parse_resource_list`). Groups: number, exponent, suffix. (The number's
#: shape is checked by :func:`_exact`.)
#: (patterns as text, compiled at their first use by ``re``'s cache: not at the plugin's
#: start, issue 34)
_QTY = r"([+-]?[0-9.]+)(?:([eE][+-]?[0-9]+)|([a-zA-Z]*))"
#: an exponent followed by a unit suffix ("1e3Mi"): said as such
_EXPONENT_AND_SUFFIX = r"[+-]?[0-9.]+([eE][+-]?[0-9]+)[a-zA-Z]+"
#: what Go's strings.TrimSpace (unicode.IsSpace) takes off a quantity's JSON string
_JSON_SPACE = " \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006" \
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
#: the number of a quantity as a decimal literal: sign, digits, optional fraction, exponent
_DECIMAL = r"([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]+))?"
#: the bound on a quantity's magnitude, in its unit: resource.Quantity's maxAllowed, where
#: the API server caps a binary-suffixed one (a decimal one that large has no int64 Value or
#: MilliValue in the kubelet either: its ScaledValue overflows); a larger one is capped to it
_MAX = 2**63 - 1
#: the decimal exponent beyond which a quantity's magnitude exceeds :data:`_MAX` whatever its
#: digits and suffix (>= 10**(40-9)), and the margin below its digits under which it is
#: under a millionth of a millionth of a unit whatever its suffix (< 10**-40 * 2**60 * 1000):
#: :func:`_exact` clamps its exponent to them, so "1e999999999" costs no 10**999999999
_EXP_HIGH, _EXP_LOW_MARGIN = 40, 40


def _exact(number: str) -> tuple[int, int]:
    """``number`` (a decimal literal as :data:`_QTY` takes it) as an exact ratio
    (numerator, positive denominator). Raises ValueError, with the message
    ``fractions.Fraction`` gives, for one without a digit before or after its point, or
    with two points (integer arithmetic: fractions and decimal cost ~0.6 MiB resident)."""
    m = re.fullmatch(_DECIMAL, number)
    if m is None or not (m.group(2) or m.group(3)):
        raise ValueError(f"Invalid literal for Fraction: {number!r}")
    sign, whole, frac, exp = m.groups()
    frac = frac or ""
    digits = (whole + frac).lstrip("0")
    if not digits:
        return 0, 1
    num = int(digits)
    shift = (int(exp) if exp else 0) - len(frac)
    # (the same result once capped and rounded: parse_quantity)
    shift = max(min(shift, _EXP_HIGH), -(len(digits) + _EXP_LOW_MARGIN))
    den = 1
    if shift >= 0:
        num *= 10**shift
    else:
        den = 10**-shift
    return (-num if sign == "-" else num), den


def parse_quantity(text: str, *, milli: bool = False) -> int:
    """Parse a Kubernetes quantity (``"2"``, ``"1500m"``, ``"1G"``, ``"128Mi"``, ``"1e3"``)
    as resource.ParseQuantity reads it (the grammar of :data:`_QTY`: no blanks around it, an
    exponent or a unit suffix but not both).

    Returns the value as an integer, in thousandths when ``milli`` is true (CPU millicores),
    rounded up (away from zero) as the API server and the kubelet's ``MilliValue`` do, its
    magnitude capped at 2**63-1 units (:data:`_MAX`). Raises ValueError on a malformed
    quantity: ``invalid quantity '<text>'``, and why when it is one of those two.
    """
    m = re.fullmatch(_QTY, text)
    if not m or (m.group(3) or "") not in _SUFFIX:
        raise ValueError(_why_invalid(text))
    num, den = _exact(m.group(1) + (m.group(2) or ""))
    mul, div = _SUFFIX[m.group(3) or ""]
    num *= mul
    den *= div
    if abs(num) > _MAX * den:
        num, den = (_MAX if num > 0 else -_MAX), 1
    num *= 1000 if milli else 1
    n = num // den
    return n + (1 if n * den != num and num > 0 else 0)


def _why_invalid(text: str) -> str:
    """The error of a quantity :data:`_QTY` refuses: ``invalid quantity '<text>'``, with the
    reason when it has blanks around it or an exponent with a unit suffix."""
    msg = f"invalid quantity {text!r}"
    if text and text.strip() != text:
        return f"{msg}: blanks around it (a Kubernetes quantity has none)"
    m = re.fullmatch(_EXPONENT_AND_SUFFIX, text)
    if m is not None:
        return (f"{msg}: an exponent ({m.group(1)}) and a unit suffix together (a Kubernetes "
                "quantity has one or the other)")
    return msg


class ResourceListError(ValueError):
    """A resource list that does not parse (:func:`parse_resource_list`). ``key``: the
    resource whose quantity does not parse (``None``: the list is not a mapping);
    ``value``: the offending object as given. The message says what is wrong without
    naming the field: callers put the place in their own error."""

    def __init__(self, message: str, key: str | None, value: Any) -> None:
        super().__init__(message)
        self.key = key
        self.value = value


def parse_resource_list(doc: Any) -> dict[str, int]:
    """A Kubernetes ``ResourceList`` (``requests`` or ``limits`` as decoded JSON or YAML:
    resource name -> quantity) in the kubelet's units: ``cpu`` in millicores, everything
    else as :func:`parse_quantity` gives it (bytes for memory and hugepages), each taken
    without the blanks around it as Quantity.UnmarshalJSON does (strings.TrimSpace: the API
    server serves ``cpu: " 2 "`` as 2). ``None``: no
    list, ``{}``. Raises :class:`ResourceListError` for a list that is not a mapping or a
    quantity that does not parse (its message: ``expected a mapping, got <type>``, or
    :func:`parse_quantity`'s)."""
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise ResourceListError(f"expected a mapping, got {type(doc).__name__}", None, doc)
    out: dict[str, int] = {}
    seen = _PARSED
    for k, v in doc.items():
        cpu = k == "cpu"
        if type(v) is str and (n := seen.get((v, cpu))) is not None:
            out[str(k)] = n
            continue
        if isinstance(v, (Mapping, list)):  # (never str()'d: its text may be huge)
            raise ResourceListError("not a quantity", str(k), v)
        try:
            n = parse_quantity(str(v).strip(_JSON_SPACE), milli=cpu)
        except ValueError as e:
            raise ResourceListError(str(e), str(k), v) from None
        out[str(k)] = n
        if type(v) is str and len(v) <= 64:
            if len(seen) >= _PARSED_MAX:
                seen.clear()
            seen[(v, cpu)] = n
    return out


#: quantity text as given, and whether it is in millicores -> its value (parse_resource_list):
#: a node's pods repeat a few quantities ("1", "250m", "256Mi"), each ~13 us to parse (a
#: watch's LIST of 110 pods: 8 ms -> 2 ms); cleared when it holds :data:`_PARSED_MAX`
_PARSED: dict[tuple[str, bool], int] = {}
_PARSED_MAX = 4096
