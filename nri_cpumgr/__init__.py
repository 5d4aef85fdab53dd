"""nri-cpumgr: the kubelet's node resource managers as an NRI plugin."""

__version__ = "0.1.0"
