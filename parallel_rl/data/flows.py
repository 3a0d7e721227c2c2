"""Data flows: how collected data reaches the learner. One object per flow, chosen by the policy.

A flow decides, for every role, what differs between learning from a replay buffer and learning from
fresh on-policy data: which buffer holds rows, how collectors are metered, how the learner is fed and when
it publishes, what the serial pipeline does with a batch of collected data. Everywhere else the pipelines
ask the flow (``policy.flow`` or :func:`flow_of`) instead of branching on ``on_policy``.

- :data:`REPLAY` (off-policy: DQN, SAC, TD3): rows join a replay buffer and are sampled many times; the
  coordinator meters collectors by an allowance of env steps ahead of the learner
  (``parallel.commander.max_env_steps_per_update``).
- :data:`SEGMENTS` (synchronous on-policy: PPO): each policy version gets one segment of ``n_sample`` env
  steps, split between the collectors; the learner trains on it once, as a whole, publishes the next version
  at once, and the collectors wait for it. Rows are never reused.
- :data:`ASYNC` (asynchronous on-policy: IMPALA, APPO, or PPO with ``policy.flow="async"``): collectors never
  wait for a version, they act with the newest one they loaded and every row carries its behaviour
  policy's ``logp`` and version (``collect_iter``); they wait only for room in a bounded queue
  (``parallel.commander.rollout_queue_batches``, the replay allowance counted in rows the learner has not
  taken). The learner trains on batches of the oldest queued ``n_sample`` rows within ``max_staleness``
  versions, each row once, and publishes every update. Older rows are dropped and counted.

A new flow is one more subclass here, chosen by :func:`flow_of`, and one metering class for its coordinator
side (``parallel_rl.coordinator.metering.METERING``, keyed by ``name``). Nothing here imports torch: the
coordinator (a control plane) asks the same objects.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from ..errors import ConfigError


class DataFlow:
    """The base: what every flow answers. Subclasses set the class attributes and override the methods."""

    name = ""
    # DI-engine's ``policy.on_policy`` key and ``Policy.on_policy`` attribute: rows are used once, fresh
    on_policy = False
    # the replay buffer types that fit; the first is the default
    buffer_types: Tuple[str, ...] = ()
    # the learner writes its full state (to take over from) with every checkpoint, not every save_state_every
    state_with_every_checkpoint = False
    # the learner's batches are whole segments (one update per segment), not sampled rows
    whole_segments = False
    # serial collectors drop the surplus of a vector step past n_sample (kept for the next call otherwise)
    drop_extra = True
    # a collector's chunks go out at once (the learner waits for them), not batched with the next flush
    urgent_chunks = False
    # a new policy version ends a collector's wait for allowance (its first chunk announces the version)
    new_version_ends_wait = True
    # a learner's batch holds time-ordered env lanes (GAE, V-trace): env ids are made distinct per chunk
    lanes = False
    # the learner reports what it trained on as ``<name>s``, ``<name>_rows`` (the last batch),
    # ``<name>_rows_total`` and ``<name>_staleness_max`` (learn info, task result); "": nothing
    learner_stats = ""

    @property
    def default_buffer_type(self) -> str:
        return self.buffer_types[0]

    def check_config(self, cfg: Mapping[str, Any]) -> None:
        """What this flow needs of a compiled config; ConfigError naming the key and the value."""
        buf_type = cfg["policy"]["other"]["replay_buffer"]["type"]
        if buf_type not in self.buffer_types:
            flow = f" (policy.flow={self.name!r})" if "flow" in cfg["policy"] else ""
            raise ConfigError(
                f"policy.other.replay_buffer.type={buf_type!r} does not fit the "
                f"{'on' if self.on_policy else 'off'}-policy {cfg['policy']['type']!r}{flow}: use "
                f"{', '.join(self.buffer_types[:-1])}{' or ' if len(self.buffer_types) > 1 else ''}"
                f"{self.buffer_types[-1]} (or leave the key out)"
            )

    def learner_batch_size(self, policy: Any) -> int:
        """Rows per learner batch, as the coordinator answers a learner's sample request (``policy``: the
        ``policy`` section, read by attribute: ``PolicySpec.read(cfg)``)."""
        raise NotImplementedError

    def publish_every(self, learner: Any) -> int:
        """Updates between two published policy versions (``learner``: the ``parallel.learner`` section, read by
        attribute)."""
        raise NotImplementedError

    def learner_prefetch(self, learner: Any) -> int:
        """Batches a learner's data thread asks for per round trip (and keeps ready)."""
        return int(learner.prefetch_batches)

    def train_on_collected(self, learner: Any, buffer: Any, data: Dict[str, Any], learn: Any, envstep: int) -> None:
        """The serial pipelines' step after collecting ``data``."""
        raise NotImplementedError

    def collector_meter(self) -> "Meter":
        """A fresh meter for one collector process: how many env steps it may still collect."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.name} flow>"


class Meter:
    """A collector's view of the control block (the coordinator's answer to its metadata): how many env steps
    it may still collect. ``None`` means no limit."""

    def left(self, control: Mapping[str, Any], version: int, unreported: int) -> Optional[int]:
        raise NotImplementedError

    def sent(self, control: Mapping[str, Any], version: int, env_steps: int) -> None:
        """``env_steps`` collected with ``version`` just left in a chunk."""

    def clip(self, ask: int, left: Optional[int], room: int) -> int:
        """How many rows to ask the env manager for now: ``ask`` wanted, ``left`` allowed (None: no limit),
        ``room`` rows of whole vector steps still fitting the chunk."""
        return ask

    def on_control(self) -> None:
        """A new control block arrived: it counts everything sent before it."""

    def woken_by_versions(self, version: int) -> bool:
        """Whether a newer policy version should answer this collector's wait for allowance (acting with
        ``version``)."""
        return True


class ReplayFlow(DataFlow):
    """Off-policy: a replay buffer, sampled ``update_per_collect`` times per collect; priorities fed back."""

    name = "replay"
    buffer_types = ("advanced", "naive", "episode")

    def learner_batch_size(self, policy: Any) -> int:
        return int(policy.learn.batch_size)

    def publish_every(self, learner: Any) -> int:
        return int(learner.publish_every)

    def train_on_collected(self, learner: Any, buffer: Any, data: Dict[str, Any], learn: Any, envstep: int) -> None:
        buffer.push(data, cur_collector_envstep=envstep)
        train_from_buffer(learner, buffer, learn, envstep)

    def collector_meter(self) -> Meter:
        return AllowanceMeter()


class AllowanceMeter(Meter):
    """Off-policy: the cluster may run ``allowed_env_steps`` ahead; what this collector collected but the
    coordinator has not counted yet (``unreported``) is taken off."""

    def __init__(self) -> None:
        self.unreported = 0  # env steps sent in chunks since the last control block

    def left(self, control: Mapping[str, Any], version: int, unreported: int) -> Optional[int]:
        allowed: Optional[int] = control.get("allowed_env_steps")
        if allowed is None:
            return None
        return allowed - int(control.get("env_steps", 0)) - self.unreported - unreported

    def sent(self, control: Mapping[str, Any], version: int, env_steps: int) -> None:
        self.unreported += env_steps

    def on_control(self) -> None:
        self.unreported = 0


class OnPolicyFlow(DataFlow):
    """What both on-policy flows share: rows used once, whole vector steps of one policy version per chunk,
    ``collect.n_sample`` rows per update, every update published."""

    on_policy = True
    state_with_every_checkpoint = True  # a learner that takes over resumes at the version collectors act with
    drop_extra = False  # every row of a call comes from the policy loaded now
    lanes = True

    def check_config(self, cfg: Mapping[str, Any]) -> None:
        policy, envs = cfg["policy"], cfg["env"]["collector_env_num"]
        if policy["nstep"] != 1:
            raise ConfigError(
                f"policy.nstep must be 1 for the on-policy {policy['type']!r} (its advantage "
                f"estimator, GAE or V-trace, does the multi-step returns), got {policy['nstep']}"
            )
        chunk_size = cfg["parallel"]["collector"]["chunk_size"]
        if chunk_size < envs:
            raise ConfigError(
                f"parallel.collector.chunk_size must hold one vector step of the on-policy "
                f"{policy['type']!r} (>= env.collector_env_num), got "
                f"cfg.parallel.collector.chunk_size={chunk_size} cfg.env.collector_env_num={envs}"
            )
        super().check_config(cfg)
        world_size = cfg["parallel"]["learner"]["world_size"]
        if world_size > 1:
            raise ConfigError(
                f"parallel.learner.world_size={world_size} needs an off-policy algorithm (dqn, "
                f"sac): the on-policy {policy['type']!r} trains on env lanes in time order, which "
                f"are not split across ranks; use world_size=1"
            )

    def learner_batch_size(self, policy: Any) -> int:
        return int(policy.collect.n_sample)

    def publish_every(self, learner: Any) -> int:
        # synchronous collectors wait for every version; asynchronous ones act with the newest, and the staleness
        # bound counts updates: a version held back would age every row collected meanwhile
        return 1

    def learner_prefetch(self, learner: Any) -> int:
        # synchronous: the next segment is asked for once the learner trained on the last one (asked earlier, it
        # would be asked for with the iteration before); asynchronous: one batch ready while the learner trains on
        # another hides the round trip, and every batch held ahead is one version older by the time it is trained
        return 1

    def train_on_collected(self, learner: Any, buffer: Any, data: Dict[str, Any], learn: Any, envstep: int) -> None:
        learner.train(data, envstep)  # one update on the rows (the policy's epochs), then they are dropped


class SegmentFlow(OnPolicyFlow):
    """Synchronous on-policy: one segment of ``collect.n_sample`` env steps per policy version, trained on
    once by the version after it."""

    name = "segments"
    buffer_types = ("segment",)
    whole_segments = True
    urgent_chunks = True
    new_version_ends_wait = False  # the wait ends with the new version's share of its segment
    learner_stats = "segment"

    def collector_meter(self) -> Meter:
        return SegmentMeter()


class SegmentMeter(Meter):
    """On-policy: only the current policy version may collect, and only this collector's share of its
    segment (``segment_env_steps`` in the control block), counted against what it sent with that version."""

    def __init__(self) -> None:
        self._sent: Tuple[Any, int] = (None, 0)  # ((version, segment round), env steps sent with it)

    def left(self, control: Mapping[str, Any], version: int, unreported: int) -> Optional[int]:
        if version < 0 or int(control.get("policy_version", -1)) != version:
            return 0
        key, sent = self._sent
        sent = sent if key == (version, control.get("segment_round")) else 0
        return int(control.get("segment_env_steps") or 0) - sent - unreported

    def sent(self, control: Mapping[str, Any], version: int, env_steps: int) -> None:
        key, sent = self._sent
        now = (version, control.get("segment_round"))
        self._sent = (now, (sent if key == now else 0) + env_steps)

    def clip(self, ask: int, left: Optional[int], room: int) -> int:
        return min(ask, room, ask if left is None else left)  # whole vector steps that fit the chunk


def train_from_buffer(learner: Any, buffer: Any, learn: Any, envstep: int) -> None:
    """Off-policy: ``learn.update_per_collect`` updates on batches from the replay buffer, priorities fed back
    (``learn``: the policy's learn section, read by attribute)."""
    for _ in range(learn.update_per_collect):
        batch = buffer.sample(learn.batch_size, learner.train_iter)
        if batch is None:
            break
        learner.train(batch, envstep)
        if learner.priority_info is not None:
            buffer.update(learner.priority_info)


class AsyncFlow(OnPolicyFlow):
    """Asynchronous on-policy (IMPALA, APPO): collectors act with the newest version they loaded and never
    wait for one, only for room in the learner's bounded queue; the learner trains on the oldest
    ``collect.n_sample`` queued rows within ``max_staleness`` versions of the iteration it trains them at, each
    row once, and the rows carry their behaviour policy's ``logp`` and version (``collect_iter``) for the
    off-policy correction."""

    name = "async"
    buffer_types = ("rollout",)
    learner_stats = "rollout"
    # only room in the queue ends a wait: the learner publishes every update, and a version that let every
    # collector collect a batch past the queue would undo the bound
    new_version_ends_wait = False

    def check_config(self, cfg: Mapping[str, Any]) -> None:
        super().check_config(cfg)
        batches = cfg["parallel"]["commander"]["rollout_queue_batches"]
        if not isinstance(batches, int) or isinstance(batches, bool) or batches < 0:
            raise ConfigError(
                f"parallel.commander.rollout_queue_batches must be a whole number of learner batches "
                f">= 0 (3: collectors stay three batches ahead of the learner; 0: no limit), got "
                f"{batches!r}"
            )

    def collector_meter(self) -> Meter:
        return QueueMeter()


class QueueMeter(AllowanceMeter):
    """Asynchronous on-policy: the allowance is this collector's share of the room left in the learner's queue
    (the coordinator's ``allowed_env_steps``; None: no limit), and nothing before a first policy is loaded
    (nothing to act with). A chunk holds whole vector steps, all of the version it is stamped with."""

    def left(self, control: Mapping[str, Any], version: int, unreported: int) -> Optional[int]:
        return 0 if version < 0 else super().left(control, version, unreported)

    clip = SegmentMeter.clip  # whole vector steps, no more than the share left (rounded up to a vector step)

    def woken_by_versions(self, version: int) -> bool:
        # waiting for room, a collector picks the newest version up when it gets room: waking it for each of
        # them (every update) would only cost a round trip. Before its first one, a version is what it waits for
        return version < 0


REPLAY = ReplayFlow()
SEGMENTS = SegmentFlow()
ASYNC = AsyncFlow()
# the on-policy flows a policy config picks with its ``flow`` key (``on_policy`` false: replay)
ON_POLICY_FLOWS = {flow.name: flow for flow in (SEGMENTS, ASYNC)}


def flow_of(policy_cfg: Mapping[str, Any]) -> DataFlow:
    """The flow a policy config asks for: DI-engine's ``on_policy`` key decides between replay and on-policy
    data, and an on-policy type's ``flow`` key (``"segments"``, the default, or ``"async"``) between the
    synchronous and the asynchronous flow."""
    if not policy_cfg.get("on_policy"):
        return REPLAY
    name = policy_cfg.get("flow") or SEGMENTS.name
    if name not in ON_POLICY_FLOWS:
        raise ConfigError(
            f"policy.flow must be {' or '.join(map(repr, ON_POLICY_FLOWS))} for the on-policy "
            f"{policy_cfg.get('type')!r}, got {name!r}"
        )
    return ON_POLICY_FLOWS[name]
