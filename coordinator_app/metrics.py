"""Prometheus metrics of the coordinator (``GET /metrics``).

Gauges and counters are read from the coordinator at scrape time (a custom
collector), so nothing has to be kept in sync; the one histogram measures how
long the coordinator takes to answer worker traffic (heartbeat, metadata,
sample), long-poll waits included.
"""

from __future__ import annotations

import math
import time

from flask import Flask, Response, g, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

WORKER_TRAFFIC = {"workers.heartbeat", "workers.metadata", "buffers.sample"}


class CoordinatorCollector:
    def __init__(self, coordinator):
        self.coordinator = coordinator

    def collect(self):
        c = self.coordinator
        summary = c.summary()
        buffer = c.replay.stats()

        def counter(name, doc, value):
            family = CounterMetricFamily(f"parallel_rl_{name}", doc)
            family.add_metric([], value)
            return family

        def gauge(name, doc, value, labels=None, samples=None):
            family = GaugeMetricFamily(f"parallel_rl_{name}", doc, labels=labels)
            for label_values, v in samples if samples is not None else [([], value)]:
                family.add_metric(label_values, v)
            return family

        yield counter("env_steps", "env steps collected", summary["env_steps"])
        yield counter("train_iterations", "learner iterations", summary["train_iter"])
        yield counter("episodes", "episodes finished by collectors", summary["episodes"])
        yield counter("transitions_pushed", "transitions indexed in the replay buffer", buffer["pushed"])
        yield counter("transitions_sampled", "transitions handed to learners", buffer["sampled"])
        yield counter("transitions_evicted", "transitions evicted from the replay buffer", buffer["evicted"])
        yield counter(
            "transitions_dropped_stale",
            "on-policy transitions dropped unused, too old for the learner",
            buffer["dropped_stale"],
        )
        yield gauge("buffer_size", "transitions in the replay buffer", buffer["size"])
        yield gauge("buffer_capacity", "replay buffer capacity", buffer["capacity"])
        yield gauge("buffer_chunks", "chunk files referenced by the replay buffer", buffer["chunks"])
        yield gauge("policy_version", "newest policy version announced by a learner", summary["policy_version"])
        yield gauge("uptime_seconds", "seconds since the coordinator started", summary["uptime"])
        for name, key in (("eval_return_last", "last_eval_return"), ("eval_return_best", "best_eval_return")):
            value = summary[key]
            yield gauge(
                name, f"{key.replace('_', ' ')} (NaN before the first evaluation)", math.nan if value is None else value
            )
        yield gauge(
            "tasks",
            "tasks by kind and state",
            None,
            labels=["kind", "state"],
            samples=[([k, s], n) for k, states in summary["tasks"].items() for s, n in states.items()],
        )
        yield gauge(
            "workers",
            "workers by kind and state",
            None,
            labels=["kind", "state"],
            samples=[([k, s], n) for k, states in summary["workers"].items() for s, n in states.items()],
        )
        # whatever scalars the learner's policy reports (DQN: loss, q_value, td_error; PPO: policy_loss, ...)
        learn_info = summary.get("learn_info") or {}
        yield gauge(
            "learn_info",
            "latest scalars the learner's policy reports, by name",
            None,
            labels=["name"],
            samples=[
                ([str(k)], float(v))
                for k, v in learn_info.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            ],
        )
        yield gauge("stopped", "1 once training ended (solved, budget, failure)", int(c.system_shutdown_flag))
        yield gauge(
            "storage_healthy",
            "0 while a worker (or the coordinator) reports the shared store failing",
            int(summary["storage"]["healthy"]),
        )


def install_metrics(app: Flask, coordinator) -> None:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(CoordinatorCollector(coordinator))
    latency = Histogram(
        "parallel_rl_control_message_seconds",
        "time to answer worker traffic (heartbeat, metadata, sample), long-poll waits included",
        ["endpoint"],
        registry=registry,
        buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
    )

    @app.before_request
    def _start_timer():
        g.parallel_rl_started = time.perf_counter()

    @app.after_request
    def _observe(response):
        if request.endpoint in WORKER_TRAFFIC and hasattr(g, "parallel_rl_started"):
            latency.labels(request.endpoint.split(".", 1)[1]).observe(time.perf_counter() - g.parallel_rl_started)
        return response

    @app.get("/metrics")
    def metrics():
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
