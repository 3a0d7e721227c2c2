"""After training: evaluate, watch, plot, export and load a trained agent.

``checkpoints`` finds and loads a run's policy (one loader for every command), ``acting`` turns a
policy into the network that picks greedy actions (what ``export`` writes and ``load_policy`` runs),
``evaluate`` and ``video`` play it, ``plot`` draws learning curves, ``api`` is the notebook surface
(``parallel_rl.train``, ``parallel_rl.load_policy``) and ``commands`` the CLI's ``eval``, ``plot``,
``export``.
"""
