"""Adam (and centered RMSprop) through torch's functional kernels, without ``torch.optim.Optimizer``.

``torch.optim.Optimizer``'s methods are wrapped in ``torch._disable_dynamo``,
whose first call imports ``torch._dynamo``: 1.3-1.4 s on this 2-core machine,
paid by every learner process before its first update (a third of our whole
serial CartPole budget). ``torch.optim.adam.adam`` is the same math and does
not touch dynamo, so this class only keeps the state tensors. It runs the fused
kernel (one pass over each parameter: on a 3x512 MLP 0.4 ms of CPU per step
against 1.7 ms for the multi-tensor one), which a data-parallel rank pays in full
however small its share of the batch.

Every policy steps through it, so it is also where data-parallel learners meet: :meth:`Adam.step`
averages the gradients over the learner ranks (:func:`parallel_rl.policy.distributed.sync_gradients`,
nothing with one learner), then clips them to ``max_grad_norm`` (after the average, as one process on
the whole batch would), then steps.

:class:`RMSprop` is the optimizer of DQN's papers (Mnih et al. 2015; Young & Tian 2019 for MinAtar: centered,
alpha 0.95, eps 0.01, no momentum: the papers' "gradient momentum" 0.95 is the centered mean's decay, alpha here), chosen with ``policy.learn.optimizer="rmsprop"`` (DQN and R2D2);
:func:`make_optimizer` reads that key.
"""

from __future__ import annotations

from typing import Dict, Iterable, List

import torch
from torch import nn
from torch.optim.adam import adam
from torch.optim.rmsprop import rmsprop

from .distributed import sync_gradients


class Adam:
    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        max_grad_norm: float = 0.0,
    ):
        self.params: List[torch.nn.Parameter] = list(params)
        self.max_grad_norm = float(max_grad_norm)  # 0: no clipping
        self.lr, self.betas, self.eps, self.weight_decay = float(lr), tuple(betas), float(eps), float(weight_decay)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        # the fused kernel wants every tensor of a parameter, its step count included, on that parameter's device
        self.state_steps = [torch.zeros((), dtype=torch.float32, device=p.device) for p in self.params]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def _ready_gradients(self) -> List[int]:
        """Average the gradients over the learner ranks, clip them; the indices of the parameters that have one."""
        sync_gradients(self.params)
        if self.max_grad_norm:
            nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        return [i for i, p in enumerate(self.params) if p.grad is not None]

    @torch.no_grad()
    def step(self) -> None:
        live = self._ready_gradients()
        adam(
            [self.params[i] for i in live],
            [self.params[i].grad for i in live],
            [self.exp_avg[i] for i in live],
            [self.exp_avg_sq[i] for i in live],
            [],
            [self.state_steps[i] for i in live],
            foreach=False,
            capturable=False,
            differentiable=False,
            fused=True,
            grad_scale=None,
            found_inf=None,
            has_complex=False,
            amsgrad=False,
            beta1=self.betas[0],
            beta2=self.betas[1],
            lr=self.lr,
            weight_decay=self.weight_decay,
            eps=self.eps,
            maximize=False,
        )

    def state_dict(self) -> Dict:
        return {
            "exp_avg": [t.detach().to("cpu", copy=True) for t in self.exp_avg],
            "exp_avg_sq": [t.detach().to("cpu", copy=True) for t in self.exp_avg_sq],
            "state_steps": [t.detach().to("cpu", copy=True) for t in self.state_steps],
            "lr": self.lr,
        }

    def load_state_dict(self, state: Dict) -> None:
        if len(state["exp_avg"]) != len(self.params):
            raise ValueError(f"optimizer state has {len(state['exp_avg'])} tensors, model has {len(self.params)}")
        # moments live where their parameters do (checkpoints hold CPU tensors)
        self.exp_avg = [t.to(p.device, copy=True) for t, p in zip(state["exp_avg"], self.params)]
        self.exp_avg_sq = [t.to(p.device, copy=True) for t, p in zip(state["exp_avg_sq"], self.params)]
        self.state_steps = [t.to(p.device, torch.float32, copy=True) for t, p in zip(state["state_steps"], self.params)]
        # the learning rate is the config's, not the saved one: a run resumed with another learning rate (PBT's
        # explore, --set) trains with it; the saved "lr" is kept in the state for readers only


class RMSprop:
    """RMSprop (``centered``: Graves 2013's, as DQN used it) with :class:`Adam`'s interface and gradient path."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 2.5e-4,
        alpha: float = 0.95,
        eps: float = 0.01,
        momentum: float = 0.95,
        centered: bool = True,
        max_grad_norm: float = 0.0,
    ):
        self.params: List[torch.nn.Parameter] = list(params)
        self.max_grad_norm = float(max_grad_norm)
        self.lr, self.alpha, self.eps = float(lr), float(alpha), float(eps)
        self.momentum, self.centered = float(momentum), bool(centered)
        self.square_avg = [torch.zeros_like(p) for p in self.params]
        self.grad_avg = [torch.zeros_like(p) for p in self.params]
        self.momentum_buffer = [torch.zeros_like(p) for p in self.params]
        self.state_steps = [torch.zeros((), dtype=torch.float32) for _ in self.params]

    zero_grad, _ready_gradients = Adam.zero_grad, Adam._ready_gradients

    @torch.no_grad()
    def step(self) -> None:
        live = self._ready_gradients()
        rmsprop(
            [self.params[i] for i in live],
            [self.params[i].grad for i in live],
            [self.square_avg[i] for i in live],
            [self.grad_avg[i] for i in live],
            [self.momentum_buffer[i] for i in live] if self.momentum else [],
            [self.state_steps[i] for i in live],
            foreach=False,
            maximize=False,
            differentiable=False,
            capturable=False,
            has_complex=False,
            lr=self.lr,
            alpha=self.alpha,
            eps=self.eps,
            weight_decay=0.0,
            momentum=self.momentum,
            centered=self.centered,
        )

    _STATE = ("square_avg", "grad_avg", "momentum_buffer", "state_steps")

    def state_dict(self) -> Dict:
        out = {name: [t.detach().to("cpu", copy=True) for t in getattr(self, name)] for name in self._STATE}
        out["lr"] = self.lr
        return out

    def load_state_dict(self, state: Dict) -> None:
        missing = [name for name in self._STATE if name not in state]
        if missing or len(state["square_avg"]) != len(self.params):
            raise ValueError(
                f"not an RMSprop state for this model (missing {missing or 'nothing'}, "
                f"{len(state.get('square_avg', []))} tensors for {len(self.params)} parameters)"
            )
        for name in self._STATE[:3]:
            setattr(self, name, [t.to(p.device, copy=True) for t, p in zip(state[name], self.params)])
        self.state_steps = [t.to(torch.float32, copy=True) for t in state["state_steps"]]
        # the learning rate stays the config's (see Adam.load_state_dict)


def make_optimizer(params: Iterable[torch.nn.Parameter], learn) -> "Adam | RMSprop":
    """The optimizer ``policy.learn`` names (``optimizer``: adam, the default, or rmsprop with ``learn.rmsprop``'s
    settings) at ``learn.learning_rate``, clipping to ``learn.max_grad_norm``."""
    kind = learn.get("optimizer", "adam")
    clip = learn.get("max_grad_norm") or 0.0
    if kind == "rmsprop":
        return RMSprop(params, lr=learn.learning_rate, max_grad_norm=clip, **learn.rmsprop)
    return Adam(params, lr=learn.learning_rate, max_grad_norm=clip)
