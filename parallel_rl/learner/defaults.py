"""The cluster learner's own section of the run config, ``parallel.learner``, with its defaults: what its process
shell (:class:`~parallel_rl.learner.shell.LearnerSlave`), data pipeline and data-parallel ranks
(:mod:`.aggregator`) read, and the launcher's CPU placement. A module of its own: the shell's imports reach the
config package (a slave compiles the configs it is sent), whose assembly imports this."""
from __future__ import annotations

from easydict import EasyDict


def learner_default_config() -> EasyDict:
    """The ``parallel.learner`` section: CPU placement, publishing, batches, checkpoints, data-parallel ranks."""
    return EasyDict(
        # under `parallel-rl run` with >= 2 CPUs, once training runs: the learner gets the last CPU to
        # itself, the coordinator and collectors share the others, while the collectors wait for the
        # learner (sharing cores with them costs it ~15% of its updates on a 2-core machine); busy
        # collectors may use every CPU (parallel_rl/entry/placement.py)
        dedicated_cpu=True,
        # publish a policy checkpoint every N iterations. Each one costs a save here, a load in every
        # collector and a cut in every collector's chunk; on CartPole 50 (~0.1 s) trains ~10% faster
        # than 20 and solves as fast
        publish_every=50,
        # batches requested per round trip (pipelined; each round trip costs the learner's core ~1 ms)
        prefetch_batches=16,
        # the learner's cache of chunk rows holds chunk_cache_size * chunk_size rows (chunk_cache_size at least
        # prefetch_batches * batch_size), in pages of 8 rows: small chunks (a run paced by the learner ends one
        # every commander.allowance_grant steps) take the pages they need. Size it for the replay, or the learner
        # reads a chunk file for most rows it samples (it says so)
        chunk_cache_size=512,
        # save the full learner state (optimizer included, for resume) every N iterations
        save_state_every=200,
        # policy/learner checkpoints kept on disk
        keep_checkpoints=20,
        # wait for this many transitions in the buffer before training
        min_buffer_size=256,
        # at most this many updates per transition collected (0: unlimited)
        max_updates_per_transition=0.0,
        # data-parallel learner ranks (torch.distributed: gloo on the CPU, NCCL for CUDA gradients). With
        # N > 1 the learner worker is a LearnerAggregator: rank 0, which samples each batch, tells every
        # rank its share, trains on its own, publishes checkpoints and talks to the coordinator; the
        # gradients are averaged over the ranks. Off-policy algorithms only (DQN, SAC)
        world_size=1,
        # rank 0 hosts the rendezvous (a TCPStore) here; the other ranks get MASTER_ADDR/MASTER_PORT.
        # Port 0: the OS picks one (ranks spawned by the aggregator); fix it for ranks on other hosts
        master_addr="127.0.0.1",
        master_port=0,
        # the aggregator starts ranks 1..N-1 as local processes; false: they are started elsewhere
        # (`parallel-rl learner-rank` with MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and join
        spawn_ranks=True,
        # seconds a collective (or the rendezvous) may wait for a rank before it fails: a dead rank
        # never hangs the others
        collective_timeout=60.0,
        # a lost rank restarts the whole group from the last learner state, at most this many times per
        # task; one more loss fails the learner task (the coordinator issues a new one)
        max_rank_restarts=3,
    )
