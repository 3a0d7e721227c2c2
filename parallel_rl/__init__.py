"""parallel_rl: a distributed reinforcement-learning training service."""
__version__ = "0.1.0"
