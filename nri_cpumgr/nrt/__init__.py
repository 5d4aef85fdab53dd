"""NodeResourceTopology: the node's per-NUMA-zone capacity for topology-aware scheduling.

:mod:`.model` computes the object (pure); :mod:`.exporter` keeps it up to date through the
API server (the ``nri-cpumgr nrt-export`` command, a second container of the DaemonSet).
"""
