"""parallel_rl: a distributed reinforcement-learning training service."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """``parallel_rl.train`` and ``parallel_rl.load_policy`` (the notebook API), imported on first use: the
    package itself stays light for the coordinator."""
    if name in ("train", "load_policy"):
        from .after import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
