"""Episodes as MP4 files: the env rendered (``render_mode="rgb_array"``) after every step, encoded with
``imageio-ffmpeg`` (its wheel ships an ffmpeg binary: nothing to install on the system).

Used by ``parallel-rl eval --video DIR`` and by the cluster's evaluators (``record_every``), which put the
file into the shared store."""
from __future__ import annotations

import logging
import os
import time
from typing import Callable, List, Optional

import gymnasium as gym
import numpy as np
from easydict import EasyDict

from ..policy.memory import LaneMemory, strip_state
from .env_manager import EnvManager
from .masked import mask_wrapper
from .registrars import import_env_modules
from ..errors import ConfigError

logger = logging.getLogger(__name__)

# H.264 in an MP4 with yuv420p pixels: what every browser's <video> plays
CODEC, PIXEL_FORMAT = "libx264", "yuv420p"


def ffmpeg_writer():
    """imageio-ffmpeg's ``write_frames``; ConfigError saying how to install it when it is missing."""
    try:
        import imageio_ffmpeg
    except ImportError:
        raise ConfigError("recording videos needs imageio-ffmpeg: pip install 'parallel_rl[video]' "
                          "(or pip install imageio-ffmpeg)") from None
    return imageio_ffmpeg.write_frames


def render_env(env_cfg: EasyDict, seed: int) -> gym.Env:
    """One copy of the config's env that renders RGB frames; ConfigError when the env cannot."""
    import_env_modules(env_cfg.import_names)
    for name in ("SDL_VIDEODRIVER", "SDL_AUDIODRIVER"):  # pygame-drawn envs: no display, no sound card
        os.environ.setdefault(name, "dummy")
    try:
        env = gym.make(env_cfg.env_id, render_mode="rgb_array", **(env_cfg.env_kwargs or {}))
    except Exception as exc:  # envs raise anything for an unsupported render mode
        raise ConfigError(f"env {env_cfg.env_id!r} cannot render frames for a video ({type(exc).__name__}: "
                          f"{exc}); drop --video (or record_every) for this env") from None
    if "rgb_array" not in (env.metadata.get("render_modes") or []):
        env.close()
        raise ConfigError(f"env {env_cfg.env_id!r} has no rgb_array render mode; drop --video (or record_every)")
    for wrap in mask_wrapper(env_cfg.env_id, env_cfg.get("mask_velocity", False)):  # the policy sees what it saw
        env = wrap(env)
    return env


def record_episode(env_cfg: EasyDict, act: Callable[[np.ndarray], np.ndarray], path: str, seed: int = 0,
                   max_frames: int = 10_000) -> dict:
    """Play one episode with ``act`` (a batch of observations -> actions, or a policy's eval mode: one with
    memory carries its state through the episode) and write it to ``path`` (MP4).
    Returns ``{"path", "frames", "return", "seconds"}``."""
    write_frames = ffmpeg_writer()
    single = render_env(env_cfg, seed)
    fps = int(single.metadata.get("render_fps") or 30)
    manager = EnvManager.from_env(single, seed=seed)  # the same observation dtype and action clipping as eval
    forward, memory = getattr(act, "forward", act), LaneMemory.of(act, 1)
    start = time.perf_counter()
    writer = None
    episode_return, frames = 0.0, 0
    tmp = f"{path}.tmp-{os.getpid()}.mp4"
    try:
        manager.reset(seed=seed)
        while frames < max_frames:
            frame = np.ascontiguousarray(single.render())
            if writer is None:
                height, width = frame.shape[:2]
                writer = write_frames(tmp, (width, height), fps=fps, codec=CODEC, pix_fmt_out=PIXEL_FORMAT,
                                      macro_block_size=1, quality=7,  # ultrafast: the encoder leaves the CPU to the env
                                      output_params=["-preset", "ultrafast", "-movflags", "+faststart"])
                writer.send(None)  # start the encoder
            writer.send(frame)
            frames += 1
            if memory is None:
                step = manager.step(forward(manager.obs))
            else:
                out = forward(manager.obs, state=memory.state)
                step = manager.step(strip_state(out))
                memory.advance(out, step)
            if step.episode_ended:
                episode_return = float(step.episode_return[0])
                writer.send(np.ascontiguousarray(single.render()))  # the last state
                frames += 1
                break
    finally:
        if writer is not None:
            writer.close()
        manager.close()
    os.replace(tmp, path)
    return {"path": path, "frames": frames, "return": episode_return, "seconds": time.perf_counter() - start}


def record_episodes(env_cfg: EasyDict, act: Callable[[np.ndarray], np.ndarray], directory: str, count: int,
                    seed: int = 0, prefix: str = "episode") -> List[dict]:
    """``count`` episodes (seeds ``seed``, ``seed + 1``, ...) as ``<directory>/<prefix>-<i>.mp4``."""
    os.makedirs(directory, exist_ok=True)
    return [record_episode(env_cfg, act, os.path.join(directory, f"{prefix}-{i}.mp4"), seed=seed + i)
            for i in range(count)]


def encoded_bytes(env_cfg: EasyDict, act: Callable[[np.ndarray], np.ndarray], seed: int,
                  scratch_dir: Optional[str] = None) -> tuple:
    """(MP4 bytes, info) of one episode, written through a scratch file (ffmpeg writes to a path)."""
    import tempfile

    with tempfile.TemporaryDirectory(dir=scratch_dir) as tmp:
        info = record_episode(env_cfg, act, os.path.join(tmp, "episode.mp4"), seed=seed)
        with open(info["path"], "rb") as f:
            return f.read(), info


_unrecordable: set = set()  # env ids whose recording failed for good (logged once)


def record_to_store(storage, cfg: EasyDict, act: Callable[[np.ndarray], np.ndarray], version: int,
                    seed: int) -> Optional[str]:
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
        storage.save_video(version, data)
    except ConfigError as exc:
        _unrecordable.add(env_id)
        logger.error("evaluator: not recording videos of %s: %s", env_id, exc)
        return None
    except (StorageError, OSError) as exc:
        logger.warning("evaluator: the video of policy %d was not stored: %s", version, exc)
        return None
    logger.info("evaluator: recorded policy %d (%d frames, return %.1f, %.2fs)", version, info["frames"],
                info["return"], info["seconds"])
    return storage.video_name(version)
