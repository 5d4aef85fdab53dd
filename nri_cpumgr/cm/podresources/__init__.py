"""Pod-level resource managers (KEP-5526) and in-place resize of exclusive CPUs.

``gates``: the feature gates; ``policy``: the kubelet's whole-pod rules (conformance);
``manager``: the same rules container by container, as the runtime shows containers;
``resize``: UpdateContainer with new resources for containers with exclusive CPUs.
``host``: what these need from the container manager (a protocol; podresources never
imports the container manager).
"""
