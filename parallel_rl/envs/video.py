"""Episodes as MP4 files: the env rendered (``render_mode="rgb_array"``) after every step, encoded with
``imageio-ffmpeg`` (its wheel ships an ffmpeg binary: nothing to install on the system). ALE's vector env
(the Atari configs) cannot render: its videos show the screen of a twin env played in lockstep
(:class:`AleScreen`) while the policy acts on the vector env's own frame stacks.

Used by ``parallel-rl eval --video DIR`` and by the cluster's evaluators (``record_every``), which put the
file into the shared store."""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, List, Optional, Tuple

import gymnasium as gym
import numpy as np
from easydict import EasyDict

from ..policy.memory import LaneMemory, strip_state
from .env_manager import EnvManager, env_kwargs_of
from .masked import mask_wrapper
from .mujoco_messages import route_mujoco_messages, uses_mujoco
from .registrars import import_env_modules
from .steps import EnvStep
from ..errors import ConfigError

logger = logging.getLogger(__name__)

# H.264 in an MP4 with yuv420p pixels: what every browser's <video> plays
CODEC, PIXEL_FORMAT = "libx264", "yuv420p"


def ffmpeg_writer():
    """imageio-ffmpeg's ``write_frames``; ConfigError saying how to install it when it is missing."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise ConfigError(
            "recording videos needs imageio-ffmpeg: pip install 'parallel_rl[video]' (or pip install imageio-ffmpeg)"
        ) from None
    return imageio_ffmpeg.write_frames


class Screen:
    """Where a recording's frames come from, beside the :class:`EnvManager` whose observations the policy acts on.
    This one: a single env that renders itself (``render_mode="rgb_array"``), stepped by the manager."""

    def __init__(self, env: gym.Env):
        self.env = env
        self.fps = int(env.metadata.get("render_fps") or 30)

    def reset(self, seed: int) -> None:
        """Called after the manager's reset (the manager resets this env)."""

    def step(self, actions: np.ndarray, step: EnvStep) -> None:
        """Called after each of the manager's steps with its actions and result (the manager steps this env)."""

    def render(self) -> np.ndarray:
        return self.env.render()

    def close(self) -> None:
        """The manager closes the env."""


def render_env(env_cfg: EasyDict, seed: int) -> gym.Env:
    """One copy of the config's env that renders RGB frames; ConfigError when the env cannot."""
    import_env_modules(env_cfg.import_names)
    for name in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):  # pygame-drawn envs: no display, no sound card
        os.environ.setdefault(name, "dummy")
    spec = gym.registry.get(env_cfg.env_id)
    if spec is not None and uses_mujoco(spec.entry_point):
        route_mujoco_messages()
    try:
        env = gym.make(env_cfg.env_id, render_mode="rgb_array", **env_kwargs_of(env_cfg, evaluating=True))
    except Exception as exc:  # envs raise anything for an unsupported render mode
        raise ConfigError(
            f"env {env_cfg.env_id!r} cannot render frames for a video ({type(exc).__name__}: "
            f"{exc}); drop --video (or record_every) for this env"
        ) from None
    if "rgb_array" not in (env.metadata.get("render_modes") or []):
        env.close()
        raise ConfigError(f"env {env_cfg.env_id!r} has no rgb_array render mode; drop --video (or record_every)")
    for wrap in mask_wrapper(env_cfg.env_id, env_cfg.get("mask_velocity", False)):  # the policy sees what it saw
        env = wrap(env)
    return env


# ale-py's vector env (what ``ALE/<Game>-v5`` makes with vectorization_mode="vector_entry_point")
ALE_VECTOR_ENTRY_POINT = "ale_py.vector_env:AtariVectorEnv"
# the screen env's settings over the config's: the game's whole screen (img_height, img_width: its own size) in
# colour, one frame (the last of each frame skip, as the console showed it: not max-pooled with the one before)
ALE_SCREEN = dict(grayscale=False, stack_num=1, maxpool=False)
ATARI_HZ = 60  # frames the console draws a second: a video of one frame per agent step plays at 60 / frameskip


class AleScreen(Screen):
    """The game's RGB screen for a video of an env that runs ale-py's own vector env (``AtariVectorEnv``).

    That env preprocesses in C++ (frame skip with max-pooling, grey, 84x84 resize, frame stack, no-op and FIRE
    reset, reward clipping, life loss) and cannot render. The policy acts on that env itself, made as the
    evaluators make it (``EnvManager.from_cfg(..., evaluating=True)``: ``env.eval_env_kwargs`` over
    ``env.env_kwargs``), one copy: its observations are the evaluators' bit for bit (4x84x84 uint8, channels
    first, 0-255) and its episode is the evaluation's env ``i``'s first one for seed ``seed + i`` (ALE seeds
    sub-env ``i`` with ``seed + i``). The frames come from a second ``AtariVectorEnv`` with the same kwargs (one
    mapping: the config's) and :data:`ALE_SCREEN` over them, seeded and stepped with the same actions in
    lockstep: the emulator, its sticky-action generator and the no-op draw depend on the seed and actions only,
    not on the screen processing, so both play the same game. Every step checks that (same reward and episode
    end; a mismatch is a RuntimeError, never a video of another game).

    Where the video and the observations differ: a frame is the last of its ``frameskip`` frames, the
    observation the max of the last two, grey, resized; on the step that ends the episode ALE stops copying frames,
    so the last frame repeats the one before. Not gymnasium's ``AtariPreprocessing`` + ``FrameStackObservation``
    on a ``render_mode="rgb_array"`` env (read in gymnasium 1.4 / ale-py 0.12.1): that resizes with Python's
    OpenCV (not installed here; ALE's vector env carries its own), draws 1..noop_max no-ops where ALE draws
    0..noop_max-1 less one for FIRE, has no FIRE reset, and pads the first stack with copies of the first frame
    unless told ``padding_type="zero"`` (ALE pads with zeros): its stacks would only be close to the trained ones."""

    def __init__(self, env_id: str, kwargs: dict):
        self.env = gym.make_vec(
            env_id,
            num_envs=1,
            vectorization_mode="vector_entry_point",
            **{**kwargs, **ALE_SCREEN, **self.screen_size(env_id)},
        )
        frameskip = {**gym.spec(env_id).kwargs, **kwargs}.get("frameskip", 4)
        self.fps = max(1, round(ATARI_HZ / frameskip))
        self._frame: Optional[np.ndarray] = None

    @staticmethod
    def screen_size(env_id: str) -> dict:
        """The game's screen as ale-py's single env gives it (most ROMs 210x160; Carnival 214, Adventure 250 high),
        as the vector env's ``img_height`` / ``img_width``: copied, not resized."""
        single = gym.make(env_id)  # the spec's own kwargs: the game's ROM, RGB observations
        try:
            height, width = single.observation_space.shape[:2]
        finally:
            single.close()
        return {"img_height": int(height), "img_width": int(width)}

    def reset(self, seed: int) -> None:
        obs, _ = self.env.reset(seed=seed)
        self._frame = obs[0, 0]

    def step(self, actions: np.ndarray, step: EnvStep) -> None:
        obs, reward, terminated, truncated, _ = self.env.step(np.asarray(actions))
        if reward[0] != step.reward[0] or bool(terminated[0] or truncated[0]) != bool(step.done[0]):
            raise RuntimeError(
                f"the video's screen env left the policy's game (reward {reward[0]} vs "
                f"{step.reward[0]}, episode end {terminated[0] or truncated[0]} vs {step.done[0]}): "
                "ALE's emulation is no longer decided by the seed and actions alone"
            )
        self._frame = obs[0, 0]

    def render(self) -> np.ndarray:
        return self._frame

    def close(self) -> None:
        self.env.close()


def recording_env(env_cfg: EasyDict, seed: int) -> Tuple[EnvManager, Screen]:
    """The env a recorded episode is played on (what the policy sees, as an evaluator's env) and its frames.

    ALE's vector env (:class:`AleScreen`) is played as the evaluators play it; any other env is one copy of the
    config's env that renders itself (ConfigError when it cannot), under the same observation dtypes and action
    clipping as evaluation."""
    import_env_modules(env_cfg.import_names)
    spec = gym.registry.get(env_cfg.env_id)  # None for an unknown id: render_env says so
    if getattr(spec, "vector_entry_point", None) == ALE_VECTOR_ENTRY_POINT:
        manager = EnvManager.from_cfg(env_cfg, 1, seed=seed, evaluating=True)
        if manager.vector_mode == "vector_entry_point":
            try:
                return manager, AleScreen(env_cfg.env_id, env_kwargs_of(env_cfg, evaluating=True))
            except BaseException:
                manager.close()
                raise
        manager.close()  # ALE's single env (vector_mode sync or async) renders itself
    single = render_env(env_cfg, seed)
    return EnvManager.from_env(single, seed=seed), Screen(single)


def record_episode(
    env_cfg: EasyDict, act: Callable[[np.ndarray], np.ndarray], path: str, seed: int = 0, max_frames: int = 10_000
) -> dict:
    """Play one episode with ``act`` (a batch of observations -> actions, or a policy's eval mode: one with
    memory carries its state through the episode) and write it to ``path`` (MP4).
    Returns ``{"path", "frames", "return", "seconds"}``."""
    write_frames = ffmpeg_writer()
    manager, screen = recording_env(env_cfg, seed)
    forward, memory = getattr(act, "forward", act), LaneMemory.of(act, 1)
    start = time.perf_counter()
    writer = None
    episode_return, frames = 0.0, 0
    tmp = f"{path}.tmp-{os.getpid()}.mp4"
    try:
        manager.reset(seed=seed)
        screen.reset(seed)
        while frames < max_frames:
            frame = np.ascontiguousarray(screen.render())
            if writer is None:
                height, width = frame.shape[:2]
                writer = write_frames(
                    tmp,
                    (width, height),
                    fps=screen.fps,
                    codec=CODEC,
                    pix_fmt_out=PIXEL_FORMAT,
                    macro_block_size=1,
                    quality=7,  # ultrafast: the encoder leaves the CPU to the env
                    output_params=["-preset", "ultrafast", "-movflags", "+faststart"],
                )
                writer.send(None)  # start the encoder
            writer.send(frame)
            frames += 1
            out = forward(manager.obs) if memory is None else forward(manager.obs, state=memory.state)
            actions = strip_state(out)  # the output itself without memory
            step = manager.step(actions)
            if memory is not None:
                memory.advance(out, step)
            screen.step(actions, step)
            if step.episode_ended:
                episode_return = float(step.episode_return[0])
                writer.send(np.ascontiguousarray(screen.render()))  # the last state
                frames += 1
                break
    finally:
        if writer is not None:
            writer.close()
        screen.close()
        manager.close()
    os.replace(tmp, path)
    return {"path": path, "frames": frames, "return": episode_return, "seconds": time.perf_counter() - start}


def record_episodes(
    env_cfg: EasyDict,
    act: Callable[[np.ndarray], np.ndarray],
    directory: str,
    count: int,
    seed: int = 0,
    prefix: str = "episode",
) -> List[dict]:
    """``count`` episodes (seeds ``seed``, ``seed + 1``, ...) as ``<directory>/<prefix>-<i>.mp4``."""
    os.makedirs(directory, exist_ok=True)
    return [
        record_episode(env_cfg, act, os.path.join(directory, f"{prefix}-{i}.mp4"), seed=seed + i) for i in range(count)
    ]


def encoded_bytes(
    env_cfg: EasyDict, act: Callable[[np.ndarray], np.ndarray], seed: int, scratch_dir: Optional[str] = None
) -> tuple:
    """(MP4 bytes, info) of one episode, written through a scratch file (ffmpeg writes to a path)."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=scratch_dir) as tmp:
        info = record_episode(env_cfg, act, os.path.join(tmp, "episode.mp4"), seed=seed)
        with open(info["path"], "rb") as f:
            return f.read(), info


_unrecordable: set = set()  # env ids whose recording failed for good (logged once)


def record_to_store(
    storage, cfg: EasyDict, act: Callable[[np.ndarray], np.ndarray], version: int, seed: int
) -> Optional[str]:
    """A cluster evaluator's recording (``record_every``): one episode of policy ``version`` into the shared
    store's ``videos/``; returns the video's name, or None when it could not be made. A failed recording never
    fails the evaluation: an env that cannot render (or a missing imageio-ffmpeg) is logged once and skipped
    from then on, a store fault is logged."""
    from ..errors import StorageError

    env_id = cfg.env.env_id
    if env_id in _unrecordable:
        return None
    try:
        data, info = encoded_bytes(cfg.env, act, seed, scratch_dir=None)
        storage.videos.save(version, data)
    except ConfigError as exc:
        _unrecordable.add(env_id)
        logger.error("evaluator: not recording videos of %s: %s", env_id, exc)
        return None
    except (StorageError, OSError) as exc:
        logger.warning("evaluator: the video of policy %d was not stored: %s", version, exc)
        return None
    logger.info(
        "evaluator: recorded policy %d (%d frames, return %.1f, %.2fs)",
        version,
        info["frames"],
        info["return"],
        info["seconds"],
    )
    return storage.videos.name(version)
