"""Which part of the cluster holds the others up, in one line, from the workers' time breakdowns.

The rules, simple on purpose (docs/scaling.md, "Where is my bottleneck?"), over each kind's share of its wall
time (the sum of its workers' seconds in a phase over the sum of their wall seconds, since they were set up):

1. The learners wait for data at least half their time: the collectors are the bottleneck, and their busiest
   phase says why (env steps: env-bound, add collectors; chunk writes: storage-bound; ...). When the collectors
   wait at least half their time too, neither side is busy: the data flow holds both (the allowance, or the
   on-policy hand-over of each version).
2. Otherwise the collectors wait (for allowance or a new policy version) at least half their time: the learner
   is the bottleneck, and its busiest phase says why.
3. Otherwise neither waits half its time: no bottleneck, both sides are busy.
"""

from __future__ import annotations

from typing import Dict, Iterable, Tuple

from ..protocol import TimeBreakdown

WAIT_LIMIT = 0.5  # a side that waits this share of its time is held up by the other

LABELS = {
    "env_step": "env steps",
    "policy_forward": "policy forward",
    "chunk_write": "chunk writes",
    "policy_load": "loading policies",
    "evaluate": "evaluating",
    "waiting": "waiting",
    "waiting_for_data": "waiting for data",
    "train": "training",
    "publishing": "publishing",
    "other": "other work",
}
COLLECTOR_ADVICE = {
    "env_step": "collectors are env-bound: add collectors",
    "policy_forward": "collectors are bound by the policy's forward: add collectors",
    "chunk_write": "collectors are bound by chunk writes: raise parallel.collector.chunk_size or use a faster "
    "shared store",
    "policy_load": "collectors are bound by loading policies: raise parallel.learner.publish_every",
    "evaluate": "collectors are busy evaluating: raise run.eval_freq",
    "other": "collectors are bound by their own bookkeeping: add collectors",
}
LEARNER_ADVICE = {
    "train": "the learner is compute-bound: a faster device, more ranks (parallel.learner.world_size) or more env "
    "steps per update (parallel.commander.max_env_steps_per_update)",
    "publishing": "the learner is bound by publishing policies: raise parallel.learner.publish_every",
    "other": "the learner is bound by its own bookkeeping",
}


def shares(breakdowns: Iterable[TimeBreakdown]) -> Dict[str, float]:
    """Each main-loop phase's share of the workers' summed wall time (``other``: the rest)."""
    wall, seconds = 0.0, {}
    for b in breakdowns:
        wall += b.wall_seconds
        for phase, value in b.phases.items():
            seconds[phase] = seconds.get(phase, 0.0) + value
    if wall <= 0:
        return {}
    seconds["other"] = max(0.0, wall - sum(seconds.values()))
    return {phase: value / wall for phase, value in seconds.items()}


def _busiest(share: Dict[str, float], waiting: str) -> str:
    return max((p for p in share if p != waiting), key=share.get)


def bottleneck(breakdowns: Iterable[Tuple[str, TimeBreakdown]]) -> str:
    """The line ``parallel-rl status`` prints after ``bottleneck:``, from ``(kind, breakdown)`` of the workers."""
    kinds: Dict[str, list] = {"collector": [], "learner": []}
    for kind, breakdown in breakdowns:
        kinds[kind].append(breakdown)
    collectors, learner = shares(kinds["collector"]), shares(kinds["learner"])
    if not collectors or not learner:
        return "unknown (collectors and a learner report their time with their heartbeats; none has yet)"
    learner_wait, collector_wait = learner.get("waiting_for_data", 0.0), collectors.get("waiting", 0.0)
    if learner_wait >= WAIT_LIMIT and collector_wait >= WAIT_LIMIT:
        return (
            f"the data flow (the learner waits for data {learner_wait:.0%}, collectors wait {collector_wait:.0%}) "
            f"— neither side is busy: the allowance (parallel.commander.max_env_steps_per_update), the "
            f"asynchronous flow's queue (parallel.commander.rollout_queue_batches) or the on-policy "
            f"hand-over of each version holds both"
        )
    if learner_wait >= WAIT_LIMIT:
        phase = _busiest(collectors, "waiting")
        return (
            f"collectors (the learner waits for data {learner_wait:.0%}; collectors: {LABELS.get(phase, phase)} "
            f"{collectors[phase]:.0%}) — {COLLECTOR_ADVICE.get(phase, 'add collectors')}"
        )
    if collector_wait >= WAIT_LIMIT:
        phase = _busiest(learner, "waiting_for_data")
        return (
            f"learner (collectors wait {collector_wait:.0%}; the learner: {LABELS.get(phase, phase)} "
            f"{learner[phase]:.0%}) — {LEARNER_ADVICE.get(phase, 'a faster learner')}"
        )
    return (
        f"none (the learner waits for data {learner_wait:.0%}, collectors wait {collector_wait:.0%}: both "
        f"sides are busy)"
    )
