"""Data-parallel learning on ``torch.distributed``: the gradient all-reduce every policy's optimizer runs.

Every policy steps its networks through :class:`parallel_rl.policy.optim.Adam`, and that optimizer calls
:func:`sync_gradients` before it clips and steps: in a process group of N learner ranks (each trained on
its own share of a batch) the gradients become their mean over the ranks, which is the gradient of the
mean loss over the whole batch when the shares are equal (DI-engine's ``allreduce`` of ``grad / world``
in its learner). Without a process group (one learner, the default) it returns at once.

:func:`open_store`, :func:`join_group` and :func:`destroy_group` open and close the group with the standard rendezvous
(a ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT``) and a timeout on every collective, so a rank that died
makes the others fail instead of waiting forever. :func:`broadcast_state` gives every rank rank 0's
state (DistributedDataParallel's broadcast at construction), without pickling anything.
"""
from __future__ import annotations

import datetime
import logging
from typing import Any, Iterable, Optional

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


def world_size() -> int:
    """Ranks in the process group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def backend_for(device: str) -> str:
    """gloo on the CPU; on CUDA, NCCL for the CUDA tensors (gradients) and gloo for the CPU ones (control)."""
    return "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"


def open_store(rank: int, master_addr: str, master_port: int, timeout: float) -> "dist.TCPStore":
    """The rendezvous: rank 0 hosts a ``TCPStore`` at ``master_addr:master_port`` (port 0: the OS picks one,
    read it from ``store.port`` and hand it to the other ranks as ``MASTER_PORT``); the others connect."""
    return dist.TCPStore(master_addr, master_port, is_master=(rank == 0),
                         timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False)


def join_group(store: "dist.TCPStore", rank: int, size: int, timeout: float, device: str = "cpu") -> None:
    """Join the process group of ``size`` ranks through ``store``; waits (at most ``timeout``) for all of them.

    Every collective of the group fails after ``timeout`` seconds instead of hanging."""
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"need 0 <= rank < world_size, got {rank=} {size=}")
    dist.init_process_group(backend_for(device), store=store, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout))
    logger.info("learner rank %d/%d: joined the process group (%s)", rank, size, backend_for(device))


def destroy_group() -> None:
    """Leave the process group (nothing when there is none)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def sync_gradients(params: Iterable[torch.nn.Parameter]) -> None:
    """Replace every gradient by its mean over the ranks (one flat all-reduce); nothing with one rank.

    A parameter without a gradient counts as a zero gradient, so every rank reduces the same shapes."""
    size = world_size()
    if size == 1:
        return
    params = list(params)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat.div_(size)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(g)
        offset += n


def broadcast_state(state: Any, src: int = 0) -> Any:
    """``state`` (nested dicts and lists of tensors and numbers) as rank ``src`` has it, on every rank.

    Every rank passes a state of the same structure (the same policy built from the same config);
    tensors are broadcast in place and numbers travel as 0-d float64 tensors."""
    if isinstance(state, dict):
        return {k: broadcast_state(state[k], src) for k in sorted(state)}
    if isinstance(state, (list, tuple)):
        return type(state)(broadcast_state(v, src) for v in state)
    if isinstance(state, torch.Tensor):
        out = state.detach().clone()
        dist.broadcast(out, src)
        return out
    if isinstance(state, (bool, int, float)):
        t = torch.tensor(float(state), dtype=torch.float64)
        dist.broadcast(t, src)
        return type(state)(t.item())
    raise TypeError(f"broadcast_state: cannot broadcast a {type(state).__name__} ({state!r:.80})")


def broadcast_bytes(data: Optional[bytes], src: int = 0) -> bytes:
    """Bytes from rank ``src`` (who passes them; the others pass None): a length, then a uint8 tensor."""
    n = torch.tensor([len(data) if data is not None else 0], dtype=torch.int64)
    dist.broadcast(n, src)
    buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if data
           else torch.empty(int(n.item()), dtype=torch.uint8))
    if int(n.item()):
        dist.broadcast(buf, src)
    return bytes(buf.numpy())
