"""Taking over a node whose CPUs and memory the kubelet's static managers assigned.

:mod:`nri_cpumgr.adopt.kubelet` reads the kubelet's checkpoints (checksums verified the
kubelet's way, :mod:`nri_cpumgr.adopt.gohash`); :mod:`nri_cpumgr.adopt.adopt` turns them into
the plugin's starting state and reconciles it with the runtime's first Synchronize.
"""

from __future__ import annotations

import os

#: The kubelet's CPU manager checkpoint, a file of its state directory.
CPU_STATE = "cpu_manager_state"


def kubelet_state_absent(directory: str) -> bool:
    """True when ``directory`` holds no kubelet ``cpu_manager_state`` (``directory`` "" or
    the file not found): :func:`nri_cpumgr.adopt.adopt.seed` has nothing to adopt then, and
    the plugin starts without importing it (issue 34). False when the file is there or its
    look-up failed otherwise (``seed`` reports that)."""
    if not directory:
        return True
    try:
        os.stat(os.path.join(directory, CPU_STATE))
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False
