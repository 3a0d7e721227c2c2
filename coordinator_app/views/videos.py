"""Recorded evaluation episodes (``policy.eval.evaluator.record_every``): a list, and each MP4 for ``<video>``."""

from flask import Blueprint, jsonify, request, send_file
from werkzeug.exceptions import RequestedRangeNotSatisfiable

from parallel_rl.errors import PathOutsideRootError, StorageFaultError
from parallel_rl.transport import ApiError

from ..context import get_coordinator

bp = Blueprint("videos", __name__, url_prefix="/api/v1/videos")


# the answer to a reader when the store fails: the coordinator's log has the store's error, which names its path
_STORE_FAILING = "the shared store cannot be read now (the coordinator's log says why); try again later"


@bp.get("")
def list_videos():
    try:
        videos = get_coordinator().storage.videos.listing()
    except StorageFaultError:
        raise ApiError(503, "unavailable", _STORE_FAILING) from None
    return jsonify({"videos": [{**v, "url": f"/api/v1/videos/{v['name']}"} for v in videos]})


@bp.get("/<name>")
def get_video(name: str):
    """The MP4, with range requests answered (browsers read a video's length and seek with them)."""
    try:
        video = get_coordinator().storage.videos.source(name)  # an open regular file of the store, size, mtime
    except (FileNotFoundError, PathOutsideRootError):
        raise ApiError(404, "not_found", f"no video {name!r}; GET /api/v1/videos lists them") from None
    except StorageFaultError:
        raise ApiError(503, "unavailable", _STORE_FAILING) from None
    answer = send_file(
        video.file,
        mimetype="video/mp4",
        download_name=name,
        max_age=3600,
        conditional=False,
        etag=False if video.mtime is None else f"{video.mtime}-{video.size}",
        last_modified=video.mtime,
    )
    answer.content_length = video.size  # send_file knows the length of a path or of bytes, not of an open file
    try:
        return answer.make_conditional(request, accept_ranges=True, complete_length=video.size)
    except RequestedRangeNotSatisfiable:
        video.file.close()
        raise
