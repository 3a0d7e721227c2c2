"""The live dashboard at ``/``: static HTML + JS (no build step) that polls the REST API."""

import os

from flask import Blueprint, send_from_directory

STATIC = os.path.join(os.path.dirname(os.path.dirname(__file__)), "static")

bp = Blueprint("dashboard", __name__)


@bp.get("/")
def index():
    return send_from_directory(STATIC, "dashboard.html", max_age=0)


@bp.get("/static/<path:name>")
def static(name: str):
    return send_from_directory(STATIC, name, max_age=300)
