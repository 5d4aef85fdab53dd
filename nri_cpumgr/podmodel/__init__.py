"""The pod model: what the managers know of a pod and its containers, and its QoS class."""

from nri_cpumgr.podmodel.model import (
    GUARANTEED,
    ContainerSpec,
    Pod,
    QOSClass,
    ResourceListError,
    parse_quantity,
    parse_resource_list,
    pod_qos,
)

__all__ = [
    "GUARANTEED",
    "ContainerSpec",
    "Pod",
    "QOSClass",
    "ResourceListError",
    "parse_quantity",
    "parse_resource_list",
    "pod_qos",
]
