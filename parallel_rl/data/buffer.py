"""Replay buffers that store columns (:mod:`.columns`: one numpy array per field), not rows; their registry
and factory (``create_buffer(cfg)`` builds the type ``cfg.type`` names).

``push({"obs": (n, 4), "action": (n,), ...})`` takes a batch of rows as columns, and ``sample(size)``
returns the same shape of dict plus bookkeeping columns:

- ``index``: buffer slot of each row, ``uid``: the slot's push id (a priority
  update for a slot that was overwritten since is ignored);
- ``weight`` (prioritized only): importance-sampling weights.

The coordinator uses the same classes with columns ``chunk_id`` and ``row``
(references into chunk files); ``on_evict`` tells it which rows left.

The types: ``naive`` (uniform, :mod:`.base`), ``advanced`` (prioritized, :mod:`.prioritized`), ``segment``
and ``rollout`` (synchronous and asynchronous on-policy, :mod:`.segment`), ``sequence`` and ``episode``
(:mod:`.sequence`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional, Type

from easydict import EasyDict

from ..config.section import Section
from ..registry import Registry, import_modules
from .base import BufferStats, IBuffer, NaiveReplayBuffer
from .columns import Columns, columns_len
from .prioritized import AdvancedReplayBuffer
from .segment import RolloutReplayBuffer, SegmentReplayBuffer
from .sequence import EpisodeReplayBuffer, SequenceReplayBuffer

__all__ = [
    "BUFFER_REGISTRY",
    "AdvancedReplayBuffer",
    "BufferStats",
    "Columns",
    "EpisodeReplayBuffer",
    "IBuffer",
    "NaiveReplayBuffer",
    "RolloutReplayBuffer",
    "SegmentReplayBuffer",
    "SequenceReplayBuffer",
    "buffer_default_config",
    "buffer_section",
    "columns_len",
    "create_buffer",
    "get_buffer_cls",
]

BUFFER_REGISTRY = Registry("buffer")
BUFFER_REGISTRY.register("naive", NaiveReplayBuffer)
BUFFER_REGISTRY.register("advanced", AdvancedReplayBuffer)
BUFFER_REGISTRY.register("episode", EpisodeReplayBuffer)
BUFFER_REGISTRY.register("segment", SegmentReplayBuffer)
BUFFER_REGISTRY.register("rollout", RolloutReplayBuffer)
BUFFER_REGISTRY.register("sequence", SequenceReplayBuffer)


def buffer_default_config(buffer_type: str) -> EasyDict:
    """The defaults of buffer type ``buffer_type``'s section (DI-engine's seed name)."""
    return BUFFER_REGISTRY.get(buffer_type).default_config()


def buffer_section(buffer_type: str) -> Optional[Type[Section]]:
    """The section of buffer type ``buffer_type`` (``policy.other.replay_buffer``); None for a registered buffer
    that brings only its ``default_config()``."""
    return getattr(BUFFER_REGISTRY.get(buffer_type), "section", None)


def get_buffer_cls(cfg: Mapping) -> type:
    """The buffer class ``cfg.type`` names (DI-engine's ``get_buffer_cls``), after importing ``cfg.import_names``."""
    import_modules(cfg.get("import_names", []), "buffer import_names")
    return BUFFER_REGISTRY.get(cfg.get("type", "advanced"))


def create_buffer(
    cfg: Mapping, *args: Any, on_evict: Optional[Callable[[Columns], None]] = None, **kwargs: Any
) -> IBuffer:
    """Build the buffer named by ``cfg.type`` (``naive``, ``advanced``, ``episode`` or a registered one);
    ``args`` / ``kwargs`` go to its constructor (DI-engine's ``tb_logger``, ``exp_name``, ``instance_name``)."""
    return get_buffer_cls(cfg)(cfg, *args, on_evict=on_evict, **kwargs)
