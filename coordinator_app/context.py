"""What a view takes from the app serving the request: the coordinator, and the token checks. Apart from the
app factory (``coordinator_app``), which imports the views: a view importing the factory was an import circle."""

from __future__ import annotations

from flask import current_app

from parallel_rl.transport import ApiError, check_token


def get_coordinator():
    coordinator = current_app.extensions.get("parallel_rl.coordinator")
    if coordinator is None:
        raise ApiError(503, "unavailable", "no coordinator is attached to this app")
    return coordinator


def start_worker(kind: str) -> dict:
    """Start one more ``kind`` process, where the coordinator runs inside ``parallel-rl run`` (its launcher
    starts it, as it starts the first ones); 400 elsewhere: a coordinator on its own starts no processes."""
    start = current_app.extensions.get("parallel_rl.start_worker")
    if start is None:
        raise ApiError(
            400,
            "bad_request",
            f"missing field 'address': this coordinator starts no processes "
            f"(only `parallel-rl run` does); add a running {kind} by its URL",
        )
    return start(kind)


def require_token() -> None:
    """Mutating calls and worker traffic need the cluster token."""
    check_token(current_app.config.get("CLUSTER_TOKEN"))


def require_read_token() -> None:
    if current_app.config.get("AUTH_READ"):
        check_token(current_app.config.get("CLUSTER_TOKEN"))
