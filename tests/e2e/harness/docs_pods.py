"""The Kubernetes docs' static-policy example pods ("Control CPU Management Policies on the
Node": BestEffort, Burstable, Guaranteed with integer and fractional CPUs, limits only), one
``app`` container each, as ``(name, QoS, requests, limits)``: the demo, the plan-vs-plugin
e2e test and the cluster test run the same set."""

from __future__ import annotations

MEM = "200Mi"
DOCS_PODS: list[tuple[str, str, dict[str, str], dict[str, str]]] = [
    ("besteffort", "BestEffort", {}, {}),
    ("burstable-memory", "Burstable", {"memory": "100Mi"}, {"memory": MEM}),
    ("burstable-cpu", "Burstable", {"cpu": "500m"}, {"cpu": "1"}),
    ("guaranteed-1cpu", "Guaranteed", {"cpu": "1", "memory": MEM}, {"cpu": "1", "memory": MEM}),
    ("guaranteed-1500m", "Guaranteed", {"cpu": "1500m", "memory": MEM},
     {"cpu": "1500m", "memory": MEM}),
    ("guaranteed-limits-only", "Guaranteed", {}, {"cpu": "1", "memory": MEM}),
]
