"""Serial collectors: run a vector env with a policy, return columns of transitions.

``SampleSerialCollector.collect(n_sample=N)`` returns exactly N n-step
transitions (the surplus of the last vector step is kept for the next call);
``EpisodeSerialCollector.collect(n_episode=K)`` returns exactly K finished
episodes. Both report a :class:`CollectStats` in ``last_stats``.

A transition row: ``obs, action, reward, next_obs, done, discount, collect_iter``
where ``reward`` is the n-step return ``sum_k gamma^k r_{t+k}``, ``discount`` is
``gamma^k`` for the k steps it spans, and ``done`` is true only on termination
(a time-limit truncation still bootstraps). ``action`` keeps the policy's type:
int64 for Discrete spaces, float32 for Box spaces.

A policy whose collect mode returns a dict (``{"action": ..., "logp": ...,
"value": ...}``, on-policy algorithms) gets those extra columns recorded with
every row, plus ``env_id`` (rows of one env are in time order) and ``end``
(the episode ended at this step, by termination or truncation).

A policy with memory (a mode with ``initial_state``, :mod:`.memory`) is called with each lane's recurrent
state and its rows also keep that state (``hidden_h``, ``hidden_c``), carried across calls, zeroed only
where an episode ends.

Both collectors step every env at once by default. ``step_ready_envs()``
switches one to stepping only the envs that are ready
(:meth:`EnvManager.step_ready`, envs in ``AsyncVectorEnv`` worker processes):
the same loops, fed by a different step, so a slow env does not hold the
fast ones up (tianshou's ``AsyncCollector``).
"""

from __future__ import annotations

import abc
import time
from typing import Dict, List, Optional

import numpy as np
from easydict import EasyDict

from ..data.columns import Columns, columns_len  # noqa: F401 (re-exported)
from ..envs.env_manager import EnvManager
from ..errors import ConfigError
from ..policy.memory import LaneMemory, strip_state
from ..registry import Registry, import_modules
from ..tblog import add_scalars
from .defaults import SerialCollectorSection
from .nstep import NStepBuilder, action_column  # noqa: F401 (action_column: re-exported)
from .stats import CollectStats, CollectStatsBase, SequenceSummaryStats  # noqa: F401 (re-exported)

COLLECTOR_REGISTRY = Registry("collector")


class RandomPolicy:
    """Samples the env's (batched) action space: what random collection acts with."""

    def __init__(self, action_space):
        self.action_space = action_space

    def forward(self, obs: np.ndarray, **kwargs) -> np.ndarray:
        return np.asarray(self.action_space.sample())[: len(obs)]


def split_policy_output(out):
    """(actions, extra columns or None) from what a collect mode returned."""
    if isinstance(out, dict):
        return out["action"], {k: v for k, v in out.items() if k != "action"}
    return out, None


def collect_mode(policy):
    """The policy as the loop drives it: a DI-engine collect mode (it builds its own samples with
    ``process_transition`` / ``get_train_sample``) through its adapter, anything else as it is."""
    from ..policy.ding_modes import as_collect_mode  # imported when a DI-engine mode is used

    return as_collect_mode(policy)


def concat_columns(pieces: List[Columns]) -> Columns:
    if not pieces:
        return {}
    if len(pieces) == 1:
        return pieces[0]
    return {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}


def slice_columns(cols: Columns, start: int, stop: Optional[int] = None) -> Columns:
    return {k: v[start:stop] for k, v in cols.items()}


def log_collect(collector, stats: CollectStats, train_iter: int) -> None:
    """A collect call's numbers to the collector's ``tb_logger`` under DI-engine's tags:
    ``<instance_name>_iter/<name>`` at ``train_iter`` and ``<instance_name>_step/<name>`` at its ``envstep``."""
    if collector.tb_logger is None:
        return
    values = {
        "envstep_count": stats.env_steps,
        "episode_count": stats.episodes,
        "train_sample_count": stats.transitions,
        "avg_envstep_per_sec": stats.speed,
        "total_envstep_count": collector.envstep,
    }
    if len(stats.returns):
        summary = SequenceSummaryStats.from_sequence(stats.returns)
        values.update(
            reward_mean=summary.mean,
            reward_std=summary.std,
            reward_max=summary.max,
            reward_min=summary.min,
            avg_envstep_per_episode=float(np.mean(stats.lengths)),
        )
    add_scalars(collector.tb_logger, f"{collector.instance_name}_iter/", train_iter, values)
    add_scalars(collector.tb_logger, f"{collector.instance_name}_step/", collector.envstep, values)


class ISerialCollector(abc.ABC):
    @classmethod
    def default_config(cls) -> EasyDict:
        """DI-engine's seed name for the ``policy.collect.collector`` section's defaults
        (:class:`~.defaults.SerialCollectorSection`)."""
        return SerialCollectorSection.defaults()

    def __init__(
        self,
        cfg: Optional[EasyDict],
        env: Optional[EnvManager],
        policy,
        discount_factor: float,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "collector",
    ):
        """``policy``: a policy mode whose ``forward(obs, **policy_kwargs)`` returns actions. ``env`` and
        ``policy`` may come later, through ``reset_env`` / ``reset_policy`` (DI-engine's ``None`` defaults).

        ``tb_logger`` (DI-engine's keyword: anything with ``add_scalar(tag, value, step)``) gets every collect
        call's numbers (:func:`log_collect`); None writes nothing. ``exp_name`` and ``instance_name`` name
        the run and this collector (the tags' prefix)."""
        self.cfg = cfg
        self.tb_logger, self.exp_name, self.instance_name = tb_logger, exp_name, instance_name
        self._gamma = discount_factor
        self._policy = collect_mode(policy) if policy is not None else None
        self._env: Optional[EnvManager] = None
        self.envstep = 0
        self.last_stats = CollectStats()
        # wall seconds ever spent in the policy's forward and in the env's step (a worker's time breakdown)
        self.policy_seconds = self.env_seconds = 0.0
        if env is not None:
            self.reset_env(env)

    def _check_ready(self, random_collect: bool = False) -> None:
        """An env always; a policy unless the actions are random (warm-up needs none)."""
        if self._env is None or (self._policy is None and not random_collect):
            raise RuntimeError(
                f"{self.instance_name}: collect() needs an env and a policy: pass them to the "
                f"constructor or to reset_env(env) / reset_policy(policy) first"
            )

    @abc.abstractmethod
    def collect(self, *args, **kwargs): ...

    # ---- one step of the envs: every env (default) or the ready ones ----------------------------
    def _act(self, forward, policy_kwargs: dict):
        """Act on every env's observation and step them all: ``(obs, action, EnvStep, extra columns)``.

        A policy with memory acts with each lane's state, and its rows keep that state as columns."""
        obs, memory = self._env.obs, self._memory
        start = time.perf_counter()
        if memory is None:
            action, extra = split_policy_output(forward(obs, **policy_kwargs))
        else:
            out = forward(obs, state=memory.state, **policy_kwargs)
            action, extra = split_policy_output(strip_state(out))
            extra = {**(extra or {}), **memory.state}
        acted = time.perf_counter()
        step = self._env.step(action)
        self.policy_seconds += acted - start
        self.env_seconds += time.perf_counter() - acted
        if memory is not None:
            memory.advance(out, step)
        return obs, action, step, extra

    def _reset_memory(self) -> None:
        """The lanes' recurrent state from the start (None for a feed-forward policy): after an env reset."""
        self._memory = LaneMemory.of(self._policy, self._env.num_envs)

    def step_ready_envs(self, wait_num: int = 1, timeout: Optional[float] = None) -> None:
        """From now on step only the envs that are ready (tianshou's asynchronous collection).

        Each step acts on the envs whose last step has come back, sends them their actions and
        returns once at least one (up to ``wait_num``, or what is done after ``timeout`` s) of the
        stepping envs has finished; the rest keep stepping. Needs an env manager over an
        ``AsyncVectorEnv`` (``env.vector_mode="async"``).
        """
        if self._memory is not None:
            raise ConfigError(
                "stepping only the ready envs is not supported for a policy with memory "
                "(policy.model.recurrent); step every env (the default)"
            )
        if not self._env.can_step_subset:
            raise ConfigError(
                f"stepping only the ready envs needs env.vector_mode='async' (an AsyncVectorEnv), "
                f"got {self._env.vector_mode!r}"
            )
        if wait_num < 1 or wait_num > self._env.num_envs:
            raise ValueError(f"{wait_num=} must be between 1 and env_num={self._env.num_envs}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"{timeout=} must be > 0 (or None)")
        self._ready_wait = (wait_num, timeout)
        self._act = self._act_ready
        self._restart_ready()

    def _restart_ready(self) -> None:
        """After an env reset every env is ready; what was sent before is forgotten."""
        self._ready_ids = np.arange(self._env.num_envs)
        self._sent: Optional[Dict[str, np.ndarray]] = None

    def _act_ready(self, forward, policy_kwargs: dict):
        """Act on the ready envs only and step them; the rows of the envs whose step came back are valid."""
        env, ids = self._env, self._ready_ids
        obs = env.obs[ids]
        start = time.perf_counter()
        action, extra = split_policy_output(forward(obs, **policy_kwargs))
        self.policy_seconds += time.perf_counter() - start
        columns = {
            "obs": obs,
            "action": np.asarray(action),
            **{"x:" + k: np.asarray(v) for k, v in (extra or {}).items()},
        }
        if self._sent is None:  # what each env was last sent, full width (rows of stepping envs are kept)
            self._sent = {k: np.zeros((env.num_envs,) + v.shape[1:], dtype=v.dtype) for k, v in columns.items()}
        for key, value in columns.items():
            self._sent[key][ids] = value
        start = time.perf_counter()
        step = env.step_ready(columns["action"], ids, *self._ready_wait)
        self.env_seconds += time.perf_counter() - start
        self._ready_ids = np.flatnonzero(step.ready)
        sent = {k: v.copy() for k, v in self._sent.items()}  # rows of this step, as the envs were sent them
        extra = {k[2:]: v for k, v in sent.items() if k.startswith("x:")} if extra is not None else None
        return sent["obs"], sent["action"], step, extra

    @abc.abstractmethod
    def reset_env(self, _env: Optional[EnvManager] = None, gym_reset_kwargs: Optional[dict] = None) -> None:
        """Take ``_env`` (if given) and reset it; ``gym_reset_kwargs`` go to its ``reset``."""

    def reset_policy(self, _policy=None) -> None:
        if _policy is not None:
            self._policy = collect_mode(_policy)
            self._reset_memory()

    def reset(self, _policy=None, _env: Optional[EnvManager] = None) -> None:
        """New policy and/or env (DI-engine's keyword names); the env is reset either way."""
        self.reset_env(_env)
        self.reset_policy(_policy)

    @property
    def env(self) -> EnvManager:
        return self._env

    def close(self) -> None:
        if self._env is not None:
            self._env.close()


class SampleSerialCollector(ISerialCollector):
    """Collects exactly ``n_sample`` n-step transitions per call."""

    def __init__(
        self,
        cfg: Optional[EasyDict],
        env: Optional[EnvManager] = None,
        policy=None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "collector",
        *,
        nstep: int = 1,
        discount_factor: float = 0.99,
        n_sample: Optional[int] = None,
    ):
        """DI-engine's arguments in its order, then ours by keyword: ``n_sample``, what ``collect()`` collects
        when called without one (else ``cfg.n_sample``, if set); ``tb_logger``, ``exp_name``,
        ``instance_name``: see :class:`ISerialCollector`."""
        if nstep <= 0:
            raise ValueError(f"{nstep=} must be > 0")
        n_sample = n_sample if n_sample is not None else (cfg or {}).get("n_sample")
        if n_sample is None:  # DI-engine reads it from the policy
            from ..policy.ding_modes import get_attribute

            n_sample = get_attribute(policy, "n_sample")
        if n_sample is not None and n_sample <= 0:
            raise ValueError(f"{n_sample=} must be > 0")
        self._nstep = nstep
        self.default_n_sample = n_sample
        super().__init__(cfg, env, policy, discount_factor, tb_logger, exp_name, instance_name)

    def reset_env(self, _env: Optional[EnvManager] = None, gym_reset_kwargs: Optional[dict] = None) -> None:
        if _env is not None:
            self._env = _env
        if self._env is None:
            return  # nothing to reset until an env is given
        self._env.reset(**(gym_reset_kwargs or {}))
        self._reset_memory()
        self._builder = self._new_builder()
        self._ready: Columns = {}
        self._restart_ready()

    def _new_builder(self):
        """Our n-step rows, or the samples a policy builds itself (a DI-engine collect mode's adapter)."""
        make = getattr(self._policy, "sample_builder", None)
        return make(self._env.num_envs, self.default_n_sample) if make else NStepBuilder(self._nstep, self._gamma)

    def reset_policy(self, _policy=None) -> None:
        had_own = not isinstance(getattr(self, "_builder", None), NStepBuilder)
        super().reset_policy(_policy)
        if _policy is not None and self._env is not None and (had_own or hasattr(self._policy, "sample_builder")):
            self._builder = self._new_builder()  # the rows are built the new policy's way

    def step_ready_envs(self, wait_num: int = 1, timeout: Optional[float] = None) -> None:
        if self._nstep != 1:
            raise ConfigError(f"stepping only the ready envs builds 1-step transitions; got {self._nstep=}")
        super().step_ready_envs(wait_num, timeout)

    def collect(
        self,
        n_sample: Optional[int] = None,
        train_iter: int = 0,
        drop_extra: bool = True,
        random_collect: bool = False,
        record_random_collect: bool = True,
        policy_kwargs: Optional[dict] = None,
        level_seeds: None = None,
        *,
        keep_extra: bool = False,
    ) -> Columns:
        """Run the envs until ``n_sample`` transitions are ready; return exactly that many (DI-engine's arguments).

        ``n_sample=None``: the collector's configured ``n_sample``. ``drop_extra=True``: transitions
        completed beyond ``n_sample`` are dropped, as DI-engine's are (``keep_extra=True``, ours: they are
        returned first by the next call instead, so no env step is wasted); ``drop_extra=False`` returns
        them now (up to ``num_envs - 1`` more rows), so every row comes from this call's policy (on-policy
        collectors, whose next call may act with a new one).
        ``random_collect=True`` acts by sampling the env's action space (``policy_kwargs`` unused);
        with ``record_random_collect=False`` such a call's episodes are not recorded in
        ``last_stats`` (its env steps still count in ``envstep``). ``level_seeds`` (procgen level
        seeds) is not supported: anything but None is a ``ValueError``.
        """
        if level_seeds is not None:
            raise ValueError(
                f"{level_seeds=}: per-level seeds are not supported; reset the envs with "
                "reset_env(gym_reset_kwargs={'seed': ...}) instead"
            )
        if n_sample is None:
            n_sample = self.default_n_sample
            if n_sample is None:
                raise ValueError(
                    "collect() without n_sample needs a collector built with n_sample=... "
                    "(or cfg.n_sample); pass collect(n_sample=N)"
                )
        if n_sample <= 0:
            raise ValueError(f"{n_sample=} must be > 0")
        self._check_ready(random_collect)
        policy_kwargs = policy_kwargs or {}
        stats = CollectStats()
        start = time.perf_counter()
        if random_collect:
            forward, policy_kwargs = RandomPolicy(self._env.action_space).forward, {}
        else:
            forward = self._policy.forward
        env, builder, act = self._env, self._builder, self._act
        missing = n_sample - columns_len(self._ready)
        enough = builder.enough_after(missing, env.num_envs) if missing > 0 else (lambda steps: True)
        steps = 0
        ended_returns, ended_lengths = [], []  # summarised once per call, not once per vector step
        while not enough(steps):
            obs, action, step, extra = act(forward, policy_kwargs)
            builder.add(obs, action, step, extra)
            steps += step.n_valid
            if step.episode_ended:
                done_rows = np.flatnonzero(step.episode_length > 0)  # not a lost life (EnvManager.life_loss)
                ended_returns.append(step.episode_return[done_rows])
                ended_lengths.append(step.episode_length[done_rows])
        if ended_returns:
            stats.add_episodes(np.concatenate(ended_returns), np.concatenate(ended_lengths))
            stats.episodes += len(stats.returns)
        stats.env_steps = steps
        built = builder.build(train_iter) if missing > 0 else {}
        data = concat_columns([c for c in (self._ready, built) if c])
        if drop_extra:
            self._ready = slice_columns(data, n_sample) if keep_extra else {}
            data = slice_columns(data, 0, n_sample)
        else:
            self._ready = {}
        self.envstep += stats.env_steps
        stats.transitions = columns_len(data)
        stats.duration = time.perf_counter() - start
        if record_random_collect or not random_collect:
            self.last_stats = stats
            log_collect(self, stats, train_iter)
        return data

    def discard_surplus(self) -> int:
        """Drop the transitions kept by the last ``collect(keep_extra=True)`` (e.g. made by weights since replaced)."""
        dropped = columns_len(self._ready)
        self._ready = {}
        return dropped


class EpisodeSerialCollector(ISerialCollector):
    """Collects exactly ``n_episode`` whole episodes (1-step transitions) per call."""

    @classmethod
    def default_config(cls) -> EasyDict:
        return EasyDict(SerialCollectorSection.defaults(), type="episode")

    def __init__(
        self,
        cfg: Optional[EasyDict],
        env: Optional[EnvManager] = None,
        policy=None,
        tb_logger=None,
        exp_name: str = "default_experiment",
        instance_name: str = "collector",
        *,
        discount_factor: float = 0.99,
    ):
        """DI-engine's arguments in its order, then ours by keyword; ``collect()`` without ``n_episode``
        collects ``cfg.n_episode``; the DI-engine keywords: see :class:`ISerialCollector`."""
        super().__init__(cfg, env, policy, discount_factor, tb_logger, exp_name, instance_name)

    def reset_env(self, _env: Optional[EnvManager] = None, gym_reset_kwargs: Optional[dict] = None) -> None:
        if _env is not None:
            self._env = _env
        if self._env is None:
            return  # nothing to reset until an env is given
        self._env.reset(**(gym_reset_kwargs or {}))
        self._reset_memory()
        self._partial: List[List[Columns]] = [[] for _ in range(self._env.num_envs)]
        self._ready: List[Columns] = []
        self._restart_ready()

    def collect(
        self,
        n_episode: Optional[int] = None,
        train_iter: int = 0,
        policy_kwargs: Optional[dict] = None,
        spread_evenly: bool = False,
        drop_extra: bool = False,
        *,
        keep_extra: bool = False,
    ) -> List[Columns]:
        """Return the episodes finished by the step that completes ``n_episode`` (DI-engine's rule: at least
        ``n_episode``, more when several envs finish in that step). Ours: ``drop_extra=True`` returns exactly
        ``n_episode`` and drops the others (``keep_extra=True``: they are returned first by the next call).

        By default the first episodes to finish are returned (short episodes
        come first) and the rest are kept for the next call. ``spread_evenly``
        (tianshou's unbiased rule): the first ``n_episode - num_envs`` episodes
        come from any env, the last ``num_envs`` one from each env (fewer
        episodes than envs: one from each of the first ``n_episode`` envs); an
        env stops contributing once it has given its share. Call ``reset_env``
        afterwards: the other envs' partial episodes are left mid-way. ``n_episode=None``: ``cfg.n_episode``.
        """
        n_episode = n_episode if n_episode is not None else (self.cfg or {}).get("n_episode")
        if n_episode is None:
            raise ValueError(
                "collect() without n_episode needs a collector whose cfg sets n_episode; pass collect(n_episode=K)"
            )
        if n_episode <= 0:
            raise ValueError(f"{n_episode=} must be > 0")
        self._check_ready()
        policy_kwargs = policy_kwargs or {}
        stats = CollectStats()
        start = time.perf_counter()
        env = self._env
        active = np.ones(env.num_envs, dtype=bool)  # envs whose steps still count
        if spread_evenly:  # never more envs running than episodes missing: exactly n_episode, from the first envs
            active[max(0, n_episode - len(self._ready)) :] = False
        while len(self._ready) < n_episode:
            obs, action, step, extra = self._act(self._policy.forward, policy_kwargs)
            stats.env_steps += step.n_valid
            for i in np.flatnonzero(step.valid & active):
                row_extra = (
                    {}
                    if extra is None
                    else {
                        **{k: v[i : i + 1].astype(np.float32) for k, v in extra.items()},
                        "env_id": np.full(1, i, dtype=np.int64),
                        "end": np.asarray([step.terminated[i] or step.truncated[i]]),
                    }
                )
                self._partial[i].append(
                    {
                        **row_extra,
                        "obs": obs[i : i + 1],
                        "action": action_column(action[i : i + 1]),
                        "reward": step.reward[i : i + 1],
                        "next_obs": step.obs[i : i + 1],
                        "done": step.terminated[i : i + 1],
                        "discount": np.full(1, self._gamma, dtype=np.float32),
                        "collect_iter": np.full(1, train_iter, dtype=np.int64),
                    }
                )
                if step.terminated[i] or step.truncated[i]:
                    self._ready.append(concat_columns(self._partial[i]))
                    self._partial[i] = []
                    stats.add_episodes(step.episode_return[i], step.episode_length[i])
                    if spread_evenly and n_episode - len(self._ready) < active.sum():
                        active[i] = False  # this env has given its share
                        self._partial[i] = []
        cut = n_episode if drop_extra else len(self._ready)
        episodes, self._ready = self._ready[:cut], (self._ready[cut:] if keep_extra else [])
        stats.episodes = len(episodes)
        stats.transitions = sum(columns_len(e) for e in episodes)
        self.envstep += stats.env_steps
        stats.duration = time.perf_counter() - start
        self.last_stats = stats
        log_collect(self, stats, train_iter)
        return episodes


COLLECTOR_REGISTRY.register("sample", SampleSerialCollector)
COLLECTOR_REGISTRY.register("episode", EpisodeSerialCollector)


def get_serial_collector_cls(cfg: EasyDict) -> type:
    """The collector class ``cfg.type`` names (DI-engine's ``get_serial_collector_cls``), after importing
    ``cfg.import_names``."""
    import_modules(cfg.get("import_names", []), "collector import_names")
    return COLLECTOR_REGISTRY.get(cfg.get("type", "sample"))


def create_serial_collector(cfg: EasyDict, *args, **kwargs) -> ISerialCollector:
    """Build the collector named by ``cfg.type`` (``sample``, ``episode`` or a registered one); ``kwargs`` (``env``,
    ``policy``, ``tb_logger``, ...) go to its constructor (DI-engine's call)."""
    return get_serial_collector_cls(cfg)(cfg, *args, **kwargs)


def to_tensor_transitions(data, shallow_copy_next_obs: bool = True, *, device: str = "cpu"):
    """Transitions as torch tensors (DI-engine's ``to_tensor_transitions``): a dict of numpy columns gives a
    dict of tensors (no copy on the CPU), a list of them (episodes) a list. ``shallow_copy_next_obs`` (DI-engine
    shares each transition's ``next_obs`` with the next one's ``obs``) has nothing to do here: columns share
    no rows."""
    from ..policy.nets import to_tensor

    if isinstance(data, (list, tuple)):
        return [to_tensor_transitions(d, device=device) for d in data]
    return {k: to_tensor(v, device, None) for k, v in data.items()}
