"""Crash-safe JSON checkpoints with a checksum (the kubelet's checkpoint idea)."""

from nri_cpumgr.checkpoint.store import (
    BackgroundWriter,
    Checkpoint,
    CheckpointError,
    KubeletCheckpointFound,
)

__all__ = ["BackgroundWriter", "Checkpoint", "CheckpointError", "KubeletCheckpointFound"]
