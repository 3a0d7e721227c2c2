"""Data-parallel learning on ``torch.distributed``: the gradient all-reduce every policy's optimizer runs.

Every policy steps its networks through :class:`parallel_rl.policy.optim.Adam`, and that optimizer calls
:func:`sync_gradients` before it clips and steps: in a process group of N learner ranks (each trained on
its own share of a batch) the gradients become their mean over the ranks, which is the gradient of the
mean loss over the whole batch when the shares are equal (DI-engine's ``allreduce`` of ``grad / world``
in its learner). Without a process group (one learner, the default) it returns at once.

:func:`open_store`, :func:`join_group` and :func:`destroy_group` open and close the group with the standard rendezvous
(a ``TCPStore`` at ``MASTER_ADDR:MASTER_PORT``, listening on that address only) and a timeout on every
collective, so a rank that died makes the others fail instead of waiting forever. :func:`broadcast_state` gives
every rank rank 0's state (DistributedDataParallel's broadcast at construction), without pickling anything.

torch's ``TCPStore`` has no credentials: whoever reaches its port may read and write its keys (``list_keys``
included), and gloo's connections between ranks are plain TCP. :func:`authenticate_group` therefore has every
rank prove, before anything is sent through the group, that it holds the group's secret (an HMAC over nonces
every rank contributed, checked by every rank): a process that joined in a rank's place never gets the config or
the state, and a rank never takes them from an impostor of rank 0. What it cannot do is protect the traffic
after that (no encryption, no per-message authentication): keep ``master_port`` and the ranks' ports inside
the cluster's network.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import logging
import secrets
import socket
from typing import Any, Iterable, List, Optional

import numpy as np

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
    read it from ``store.port`` and hand it to the other ranks as ``MASTER_PORT``); the others connect.

    Rank 0 listens on ``master_addr`` only (torch's own server listens on every interface whatever the address:
    ``127.0.0.1`` would still be reachable from the network); ``0.0.0.0`` or ``::`` listen everywhere."""
    if rank != 0:
        return dist.TCPStore(master_addr, master_port, is_master=False, timeout=datetime.timedelta(seconds=timeout))
    listener = _listen(master_addr, master_port)
    port = listener.getsockname()[1]
    fd = listener.detach()  # the store owns the socket from here (it closes it)
    try:
        return dist.TCPStore(
            master_addr,
            port,
            is_master=True,
            timeout=datetime.timedelta(seconds=timeout),
            wait_for_workers=False,
            master_listen_fd=fd,
        )
    except BaseException:
        socket.close(fd)
        raise


def _listen(addr: str, port: int) -> socket.socket:
    """A listening TCP socket bound to ``addr:port`` (the first address ``addr`` resolves to)."""
    family, kind, proto, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(sockaddr)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise RuntimeError(
            f"the learner ranks' rendezvous cannot listen on {addr}:{port}: {exc} (set parallel."
            f"learner.master_addr/master_port to an address of this host and a free port)"
        ) from exc
    return sock


# the secret every rank of a group must hold (hex), when the ranks are given it rather than the cluster token
RANK_SECRET_ENV = "PARALLEL_RL_RANK_SECRET"


def group_secret(token: Optional[str]) -> Optional[bytes]:
    """The learner ranks' secret, derived from the cluster token (so the ranks never need the token itself,
    and a rank that has the token derives the same secret); None without a token."""
    if not token:
        return None
    return hmac.new(token.encode(), b"parallel_rl learner ranks", hashlib.sha256).digest()


def _all_gather_bytes(data: bytes, size: int) -> List[bytes]:
    """Every rank's ``data`` (the same length on every rank, a multiple of 8 bytes), in rank order."""
    mine = torch.from_numpy(np.frombuffer(data, dtype=np.int64).copy())
    out = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(out, mine)
    return [t.numpy().tobytes() for t in out]


def authenticate_group(secret: Optional[bytes], rank: int, size: int) -> None:
    """Every rank proves it holds ``secret``; call it right after :func:`join_group`, before anything else goes
    through the group. Every rank contributes a nonce, proves ``HMAC(secret, rank, all nonces)`` and checks
    every other rank's proof; the verdicts are shared and every rank raises the same RuntimeError naming the
    refused proofs, so nobody sends the config or the state to, or takes them from, an impostor.

    Without a secret on rank 0 (a cluster without a token) nothing is checked; a rank without a secret when
    rank 0 has one fails the check (it is told to set the token)."""
    if size == 1:
        return
    header = torch.tensor([int(secret is not None)], dtype=torch.int64)
    dist.broadcast(header, 0)  # whether rank 0 authenticates: every rank runs the same collectives
    if not int(header.item()):
        return
    nonces = b"".join(_all_gather_bytes(secrets.token_bytes(16), size))

    def proof(r: int) -> bytes:
        return hmac.new(secret or b"", b"rank %d of %d: " % (r, size) + nonces, hashlib.sha256).digest()

    proofs = _all_gather_bytes(proof(rank) if secret is not None else bytes(32), size)
    if secret is None:  # it cannot check the others: it reports itself
        bad = [rank]
    else:
        bad = [r for r in range(size) if not hmac.compare_digest(proofs[r], proof(r))]
    flags = torch.zeros(size, dtype=torch.int64)
    flags[bad] = 1
    verdicts = [torch.empty_like(flags) for _ in range(size)]
    dist.all_gather(verdicts, flags)  # every rank sees every rank's verdict on every other: the same message
    refused = [(checker, checked) for checker, v in enumerate(verdicts) for checked in v.nonzero().flatten().tolist()]
    if refused:
        said = "; ".join(
            f"rank {checked} by rank {checker}" if checked != checker else f"rank {checked} has none"
            for checker, checked in refused
        )
        raise RuntimeError(
            f"the learner ranks do not all hold the group's secret (refused: {said}): every rank "
            f"needs PARALLEL_RL_TOKEN (the cluster's) or {RANK_SECRET_ENV} (rank 0 gives it to the "
            f"ranks it starts); or something else connected to master_port in a rank's place"
        )


def join_group(store: "dist.TCPStore", rank: int, size: int, timeout: float, device: str = "cpu") -> None:
    """Join the process group of ``size`` ranks through ``store``; waits (at most ``timeout``) for all of them.

    Every collective of the group fails after ``timeout`` seconds instead of hanging."""
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"need 0 <= rank < world_size, got {rank=} {size=}")
    dist.init_process_group(
        backend_for(device), store=store, rank=rank, world_size=size, timeout=datetime.timedelta(seconds=timeout)
    )
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
        p.grad = flat[offset : offset + n].view_as(g)
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
    buf = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(int(n.item()), dtype=torch.uint8)
    )
    if int(n.item()):
        dist.broadcast(buf, src)
    return bytes(buf.numpy())
