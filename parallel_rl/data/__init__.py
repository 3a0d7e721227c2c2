"""Replay buffers (columnar) and their factory."""
from .buffer import (
    BUFFER_REGISTRY,
    AdvancedReplayBuffer,
    BufferStats,
    EpisodeReplayBuffer,
    IBuffer,
    NaiveReplayBuffer,
    SegmentReplayBuffer,
    buffer_default_config,
    create_buffer,
)

__all__ = [
    "BUFFER_REGISTRY",
    "AdvancedReplayBuffer",
    "BufferStats",
    "EpisodeReplayBuffer",
    "IBuffer",
    "NaiveReplayBuffer",
    "SegmentReplayBuffer",
    "buffer_default_config",
    "create_buffer",
]
