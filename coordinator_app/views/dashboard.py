"""The dashboards: a run's live dashboard at a coordinator's ``/`` and the compare view at the service's ``/``
(``parallel-rl serve``): static HTML + JS (no build step, uPlot from ``static/vendor``) that polls the REST API."""

import os

from flask import Blueprint, send_from_directory

STATIC = os.path.join(os.path.dirname(os.path.dirname(__file__)), "static")


def _dashboard(name: str, page: str) -> Blueprint:
    """A blueprint serving ``page`` at ``/`` and the static files beside it at ``/static/``."""
    bp = Blueprint(name, __name__)

    @bp.get("/")
    def index():
        return send_from_directory(STATIC, page, max_age=0)

    @bp.get("/static/<path:name>")
    def static(name: str):
        return send_from_directory(STATIC, name, max_age=300)

    return bp


bp = _dashboard("dashboard", "dashboard.html")  # a coordinator's: one run, live
compare_bp = _dashboard("compare_view", "compare.html")  # the service's: its runs, compared
