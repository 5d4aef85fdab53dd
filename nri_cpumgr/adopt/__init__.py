"""Taking over a node whose CPUs and memory the kubelet's static managers assigned.

:mod:`nri_cpumgr.adopt.kubelet` reads the kubelet's checkpoints (checksums verified the
kubelet's way, :mod:`nri_cpumgr.adopt.gohash`); :mod:`nri_cpumgr.adopt.adopt` turns them into
the plugin's starting state and reconciles it with the runtime's first Synchronize.
"""
