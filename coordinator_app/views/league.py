"""The opponent league of two-player self-play: players, payoff table, games played."""

from flask import Blueprint, jsonify

from parallel_rl.transport import ApiError

from ..context import get_coordinator

bp = Blueprint("league", __name__, url_prefix="/api/v1/league")


@bp.get("")
def get_league():
    league = getattr(get_coordinator().commander, "league", None)
    if league is None:
        raise ApiError(
            404,
            "not_found",
            "this run keeps no league: two-player self-play runs have one "
            "(env.type='pettingzoo', parallel.commander.type='league')",
        )
    return jsonify(league.table())
