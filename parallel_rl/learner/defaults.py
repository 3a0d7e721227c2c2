"""The learner's sections of the run config: ``parallel.learner``, the cluster learner's own (what its process
shell :class:`~parallel_rl.learner.shell.LearnerSlave`, data pipeline and data-parallel ranks (:mod:`.aggregator`)
read, and the launcher's CPU placement), and ``policy.learn.learner``, DI-engine's ``BaseLearner`` and its hooks
(:mod:`.learner`; ``BaseLearner.default_config()`` answers it). A module of its own: the shell's imports reach the
config package (a slave compiles the configs it is sent), whose assembly imports this."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

from easydict import EasyDict

from ..config.section import Section, setting


@dataclasses.dataclass(frozen=True)
class LearnerSection(Section):
    """The cluster learner: CPU placement, publishing, batches, checkpoints, data-parallel ranks."""

    path = "parallel.learner"
    title = "Cluster learner"

    dedicated_cpu: bool = setting(
        True,
        doc="""under `parallel-rl run` with >= 2 CPUs, once training runs: the
        learner gets the last CPU to itself, the coordinator and collectors share the others, while the collectors
        wait for the learner (sharing cores with them costs it ~15% of its updates on a 2-core machine); busy
        collectors may use every CPU (parallel_rl/entry/placement.py)""",
    )
    publish_every: int = setting(
        50,
        lo=1,
        doc="""publish a policy checkpoint every N iterations. Each one costs a
        save here, a load in every collector and a cut in every collector's chunk; on CartPole 50 (~0.1 s) trains
        ~10% faster than 20 and solves as fast""",
    )
    prefetch_batches: int = setting(
        16,
        lo=1,
        doc="""batches requested per round trip (pipelined; each round trip
        costs the learner's core ~1 ms)""",
    )
    chunk_cache_size: int = setting(
        512,
        lo=1,
        doc="""the learner's cache of chunk rows holds chunk_cache_size *
        chunk_size rows (chunk_cache_size at least prefetch_batches * batch_size), in pages of 8 rows: small chunks
        (a run paced by the learner ends one every commander.allowance_grant steps) take the pages they need. Size
        it for the replay, or the learner reads a chunk file for most rows it samples (it says so)""",
    )
    save_state_every: int = setting(
        200,
        lo=1,
        doc="""save the full learner state (optimizer included, for resume)
        every N iterations""",
    )
    keep_checkpoints: int = setting(20, lo=1, doc="policy/learner checkpoints kept on disk")
    min_buffer_size: int = setting(256, lo=0, doc="wait for this many transitions in the buffer before training")
    max_updates_per_transition: float = setting(
        0.0,
        lo=0,
        doc="""at most this many updates per transition collected
        (0: unlimited)""",
    )
    world_size: int = setting(
        1,
        lo=1,
        doc="""data-parallel learner ranks (torch.distributed: gloo on the CPU, NCCL
        for CUDA gradients). With N > 1 the learner worker is a LearnerAggregator: rank 0, which samples each batch,
        tells every rank its share, trains on its own, publishes checkpoints and talks to the coordinator; the
        gradients are averaged over the ranks. Off-policy algorithms only (DQN, SAC); at most
        policy.learn.batch_size (every rank needs rows)""",
    )
    master_addr: str = setting(
        "127.0.0.1",
        doc="""rank 0 hosts the rendezvous (a TCPStore) here; the other ranks
        get MASTER_ADDR/MASTER_PORT""",
    )
    master_port: int = setting(
        0,
        lo=0,
        hi=65535,
        doc="""the rendezvous port. 0: the OS picks one (ranks spawned by
        the aggregator); fix it for ranks on other hosts""",
    )
    spawn_ranks: bool = setting(
        True,
        doc="""the aggregator starts ranks 1..N-1 as local processes; false: they are
        started elsewhere (`parallel-rl learner-rank` with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and join""",
    )
    collective_timeout: float = setting(
        60.0,
        above=0,
        doc="""seconds a collective (or the rendezvous) may wait for a
        rank before it fails: a dead rank never hangs the others""",
    )
    init_from: Optional[str] = setting(
        None,
        nullable=True,
        doc="""warm start: a checkpoint the learner loads before its first
        update (None: a fresh model). A learner state (<shared>/learner/learner_*.pt, a serial run's ckpt/*.pt): the
        model, the optimizer's moments and the policy's own counters; a policy checkpoint (policy/policy_*.pt): the
        model only; a run's directory or shared store: its newest learner state. The run's counters (env steps,
        train iterations, policy versions) start at 0. Missing, damaged or of another algorithm/env: the learner
        task fails with one line (docs/lab.md)""",
    )
    max_rank_restarts: int = setting(
        3,
        lo=0,
        doc="""a lost rank restarts the whole group from the last learner
        state, at most this many times per task; one more loss fails the learner task (the coordinator issues a
        new one)""",
    )


def learner_default_config() -> EasyDict:
    """The ``parallel.learner`` section's defaults (the seed name)."""
    return LearnerSection.defaults()


@dataclasses.dataclass(frozen=True)
class LearnerHooksSection(Section):
    """DI-engine's short-form hooks, ``<name>_<position>`` keys (:func:`~.learner.build_learner_hook_by_cfg`). The
    cluster's learners save through the shared store instead of the save_ckpt hooks (parallel.learner)."""

    title = "Learner hooks"

    load_ckpt_before_run: str = setting("", doc="a checkpoint file to load before the first update (empty: none)")
    log_show_after_iter: int = setting(500, lo=0, doc="log the learn info every N iterations (0: never)")
    save_ckpt_after_iter: int = setting(
        0, lo=0, doc="serial: save iteration_<N>.pt in the experiment's ckpt folder every N iterations (0: never)"
    )
    save_ckpt_after_run: bool = setting(True, doc="serial: save a checkpoint when the run ends")


@dataclasses.dataclass(frozen=True)
class BaseLearnerSection(Section):
    """DI-engine's ``BaseLearner`` (parallel_rl/learner/learner.py), which runs the policy's updates and its hooks
    in the serial pipeline and in every cluster learner."""

    path = "policy.learn.learner"
    title = "Learner"

    type: str = setting("base", doc="the learner class: base, or one registered in LEARNER_REGISTRY")
    hook: Dict[str, Any] = setting(LearnerHooksSection, doc="DI-engine's hooks")
