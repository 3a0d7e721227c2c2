"""One learner update replayed as a CUDA graph (``policy.learn.cuda_graph``, SAC and TD3).

On a GPU a small actor-critic's update (256x256 networks, batch 256) is bound by kernel launches, not by
arithmetic: a few hundred launches from one Python thread, a few milliseconds, whatever the card. A CUDA graph
records those launches once and replays them with one call (PyTorch's "whole network capture": forward,
backward and the optimizer step, the optimizer's step counts on the device, as :class:`.optim.Adam` keeps them).

:class:`GraphedUpdate` wraps an update written as a function of a dict of tensors (and the caller's ``key``)
that returns a dict of tensors. On the CPU, or when disabled, it calls the function. On CUDA it runs ``WARMUP``
ordinary updates on a side stream (cuBLAS and the allocator settle), then records the next call into a graph with its own input
tensors, and from then on copies each batch into those inputs and replays. One graph per key: the inputs' names
and shapes plus the caller's ``key`` (a Python branch the update takes, e.g. TD3's delayed actor step), so a
batch of another size gets its own graph rather than a wrong one. A recording that fails (an operation the
graph cannot hold) is logged once and the update runs eagerly from then on. The graph holds the tensors it
recorded: whoever replaces them (an optimizer state loaded from a checkpoint) calls :meth:`reset`.
"""

from __future__ import annotations

import logging
from typing import Callable, Dict, Hashable, Tuple

import torch

from .distributed import world_size

log = logging.getLogger(__name__)

Tensors = Dict[str, torch.Tensor]


class GraphedUpdate:
    WARMUP = 3

    def __init__(self, update: Callable[[Tensors, Hashable], Tensors], device: str, enabled: bool = True):
        self.update = update
        self.enabled = bool(enabled) and torch.device(device).type == "cuda"
        self.graphs: Dict[Hashable, Tuple[torch.cuda.CUDAGraph, Tensors, Tensors]] = {}
        self.warmups: Dict[Hashable, int] = {}

    def reset(self) -> None:
        """Forget every recorded graph (the tensors they read or write were replaced)."""
        self.graphs.clear()
        self.warmups.clear()

    def __call__(self, inputs: Tensors, key: Hashable = ()) -> Tensors:
        # data-parallel ranks all-reduce their gradients inside the update: those calls stay eager
        if not self.enabled or world_size() > 1:
            return self.update(inputs, key)
        shapes = tuple((name, tuple(t.shape), t.dtype) for name, t in sorted(inputs.items()))
        recorded = self.graphs.get((shapes, key))
        if recorded is None:
            return self._warm_or_record((shapes, key), inputs, key)
        graph, static_in, static_out = recorded
        for name, t in inputs.items():
            static_in[name].copy_(t, non_blocking=True)
        graph.replay()
        return {name: t.clone() for name, t in static_out.items()}  # the graph's outputs: overwritten next replay

    def _warm_or_record(self, graph_key: Hashable, inputs: Tensors, key: Hashable) -> Tensors:
        done = self.warmups.get(graph_key, 0)
        if done < self.WARMUP:
            self.warmups[graph_key] = done + 1
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                out = self.update(inputs, key)
            torch.cuda.current_stream().wait_stream(side)
            return out
        static_in = {name: t.clone() for name, t in inputs.items()}
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                static_out = self.update(static_in, key)
        except RuntimeError as exc:  # recorded nothing that ran: the update itself has not happened yet
            log.warning(
                "policy.learn.cuda_graph: the update could not be recorded as a CUDA graph (%s); it runs without one",
                exc,
            )
            self.enabled = False
            return self.update(inputs, key)
        self.graphs[graph_key] = (graph, static_in, static_out)
        graph.replay()
        return {name: t.clone() for name, t in static_out.items()}
