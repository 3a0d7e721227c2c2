"""``parallel-rl eval``: N greedy episodes of a saved policy on fresh envs, through the evaluator the
pipelines use (:class:`~parallel_rl.evaluator.serial.InteractionSerialEvaluator`: each of the
``env.evaluator_env_num`` envs plays its share of the episodes, so short episodes are not favoured)."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from typing import Any, Callable, Dict, List, Optional

import numpy as np
from easydict import EasyDict

from ..envs.env_manager import EnvManager
from ..errors import ConfigError
from ..evaluator.serial import InteractionSerialEvaluator
from ..progress import episode_progress

logger = logging.getLogger(__name__)


def evaluate_policy(
    cfg: EasyDict, policy, episodes: int, seed: int, env: Optional[EnvManager] = None
) -> Dict[str, Any]:
    """Play ``episodes`` episodes with ``policy``'s eval mode; the evaluator's info (returns, lengths, steps,
    duration). ``env`` (closed here) defaults to ``env.evaluator_env_num`` fresh copies of the config's env."""
    num_envs = max(1, min(int(cfg.env.evaluator_env_num), episodes))
    env = env or EnvManager.from_cfg(cfg.env, num_envs, seed=seed, evaluating=True)
    evaluator = InteractionSerialEvaluator(
        EasyDict(max_seconds=0.0),
        env,
        policy.eval_mode,
        stop_value=cfg.run.stop_value,
        n_evaluator_episode=episodes,
        seed=seed,
    )
    try:
        with episode_progress(episodes) as on_episode:  # a bar on a terminal
            _, info = evaluator.eval(n_episode=episodes, on_episode=on_episode)
    finally:
        evaluator.close()
    return info


def summary_rows(info: Dict[str, Any]) -> list:
    """The table ``eval`` prints: one row per statistic."""
    return [
        {
            "metric": "return",
            "mean": info["eval_episode_return_mean"],
            "std": info["eval_episode_return_std"],
            "min": info["eval_episode_return_min"],
            "max": info["eval_episode_return_max"],
        },
        {
            "metric": "length",
            "mean": info["episode_length_mean"],
            "std": info.get("episode_length_std"),
            "min": info.get("episode_length_min"),
            "max": info.get("episode_length_max"),
        },
    ]


def evaluate_battle(cfg: EasyDict, policy, episodes: int, seed: int) -> Dict[str, Any]:
    """Two-player games: ``episodes`` games per configured opponent (``policy.eval.evaluator.opponents``) and
    side, through the self-play pipeline's evaluator; its info (``results[opponent][side]``, ``win_rate``)."""
    from ..envs.multiagent import BattleEnvManager
    from ..policy.bots import create_bot
    from ..evaluator.battle import BattleInteractionSerialEvaluator

    names = list(cfg.policy.eval.evaluator.opponents)
    env = BattleEnvManager.from_cfg(cfg.env, max(1, min(int(cfg.env.evaluator_env_num), episodes)), seed=seed)
    action_num = env.action_spec.n
    opponents = {name: create_bot(name, seed=seed + 30_000 + i, n_actions=action_num) for i, name in enumerate(names)}
    evaluator = BattleInteractionSerialEvaluator(
        {**cfg.policy.eval.evaluator, "max_seconds": 0.0},
        env,
        policy.eval_mode,
        opponents,
        cfg.run.stop_value,
        episodes,
        seed=seed,
    )
    try:
        _, info = evaluator.eval(n_episode=episodes)
    finally:
        evaluator.close()
    return info


def battle_rows(info: Dict[str, Any]) -> list:
    """The table ``eval`` prints for a two-player game: one row per opponent and side."""
    return [
        {"opponent": name, "side": side, **sides[side]} for name, sides in info["results"].items() for side in sides
    ]


class BackgroundRecording:
    """``eval --video``: :func:`~parallel_rl.envs.video.record_episodes` in a child process that runs beside the
    evaluation (started before it, joined after it), so rendering and encoding no longer add to its wall time.

    The child is forked: it has the parent's policy weights and torch in memory at once (~10 ms; a spawned one
    re-imports torch and unpickles the policy before its first frame: 1.7 s on a 2-core box, on a core the
    evaluation wants). It plays with the same weights, greedy, episode ``i`` from ``seed + i``: the evaluation's
    env ``i``'s first episode where gymnasium seeds sub-env ``i`` so (sync and async vector envs; an env's own
    vectorised class, CartPole's, may draw all start states from one generator). Use as a context manager:
    leaving early (an error, Ctrl-C) ends the child."""

    def __init__(
        self, env_cfg: EasyDict, act: Callable[[np.ndarray], np.ndarray], directory: str, count: int, seed: int
    ):
        context = multiprocessing.get_context("fork")
        self._results, sender = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_record_in_child,
            args=(sender, env_cfg, act, directory, count, seed),
            name="parallel-rl-video",
            daemon=True,
        )
        self._process.start()
        sender.close()  # the child holds the only sending end: its exit, however it happens, ends recv()

    def result(self) -> List[dict]:
        """Wait for the videos: ``record_episodes``' list; ConfigError (one line) when the recording failed."""
        try:
            ok, value = self._results.recv()  # bounded: an episode stops at record_episode's max_frames
        except EOFError:
            self._process.join()
            ok, value = False, f"the recording process died (exit code {self._process.exitcode})"
        self._process.join()
        if not ok:
            raise ConfigError(f"--video: {value}")
        return value

    def __enter__(self) -> "BackgroundRecording":
        return self

    def __exit__(self, *exc_info) -> None:
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._results.close()


def _record_in_child(sender, env_cfg: EasyDict, act, directory: str, count: int, seed: int) -> None:
    """The forked child: record, send ``(True, infos)`` or ``(False, one line)``."""
    import torch

    from ..envs.video import record_episodes

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the parent ends us
    torch.set_num_threads(1)  # the parent's intra-op threads are not in a fork; one thread never needs them
    # the evaluation keeps its core: the recording (~0.9 s of CPU for a 400-frame CartPole episode) and its ffmpeg
    # (as much again, several threads; it inherits this) take what is left, with the evaluation's time to finish
    os.nice(10)
    try:
        sender.send((True, record_episodes(env_cfg, act, directory, count, seed)))
    except ConfigError as exc:
        sender.send((False, str(exc)))
    except Exception as exc:  # noqa: BLE001 (the parent turns it into the CLI's one-line error)
        sender.send(
            (
                False,
                f"recording into {directory} failed ({type(exc).__name__}: {exc}); give --video a "
                "directory that can be created and written",
            )
        )
    finally:
        sender.close()
