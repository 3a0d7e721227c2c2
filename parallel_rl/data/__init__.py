"""Replay buffers (columnar) and their factory."""

from .buffer import (
    BUFFER_REGISTRY,
    AdvancedReplayBuffer,
    BufferStats,
    EpisodeReplayBuffer,
    IBuffer,
    NaiveReplayBuffer,
    RolloutReplayBuffer,
    SegmentReplayBuffer,
    SequenceReplayBuffer,
    buffer_default_config,
    create_buffer,
    get_buffer_cls,
)

__all__ = [
    "BUFFER_REGISTRY",
    "AdvancedReplayBuffer",
    "BufferStats",
    "EpisodeReplayBuffer",
    "IBuffer",
    "NaiveReplayBuffer",
    "RolloutReplayBuffer",
    "SegmentReplayBuffer",
    "SequenceReplayBuffer",
    "buffer_default_config",
    "create_buffer",
    "get_buffer_cls",
]
