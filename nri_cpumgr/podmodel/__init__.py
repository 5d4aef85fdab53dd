"""The pod model: what the managers know of a pod and its containers, and its QoS class."""

from nri_cpumgr.podmodel.model import (
    ContainerSpec,
    Pod,
    QOSClass,
    parse_quantity,
    pod_qos,
)

__all__ = ["ContainerSpec", "Pod", "QOSClass", "parse_quantity", "pod_qos"]
