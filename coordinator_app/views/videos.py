"""Recorded evaluation episodes (``policy.eval.evaluator.record_every``): a list, and each MP4 for ``<video>``."""
from flask import Blueprint, jsonify, send_file

from parallel_rl.errors import PathOutsideRootError
from parallel_rl.transport import ApiError

from ..context import get_coordinator

bp = Blueprint("videos", __name__, url_prefix="/api/v1/videos")


@bp.get("")
def list_videos():
    videos = get_coordinator().storage.videos()
    return jsonify({"videos": [{**v, "url": f"/api/v1/videos/{v['name']}"} for v in videos]})


@bp.get("/<name>")
def get_video(name: str):
    """The MP4, with range requests answered (browsers read a video's length and seek with them)."""
    try:
        source = get_coordinator().storage.video_source(name)  # a local path, or the object's bytes
        return send_file(source, mimetype="video/mp4", conditional=True, download_name=name, max_age=3600)
    except (FileNotFoundError, PathOutsideRootError):
        raise ApiError(404, "not_found", f"no video {name!r}; GET /api/v1/videos lists them") from None
