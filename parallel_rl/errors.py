"""Every exception parallel_rl raises on purpose.

Messages say what went wrong *and* how to fix it: they are printed to users
as one line by the CLI.
"""

from __future__ import annotations


class ParallelRLError(Exception):
    """Base class: the CLI prints ``str(exc)`` and exits non-zero."""

    exit_code = 1


class ConfigError(ParallelRLError, ValueError):
    """A config file, key or value is wrong (unknown key, bad type, ...)."""

    exit_code = 2


class SharedDirInUseError(ConfigError):
    """Another run holds the shared directory (two runs on one directory would delete each other's files)."""


class StorageError(ParallelRLError):
    """The shared filesystem refused an operation or held a bad file."""


class StateFormatError(StorageError):
    """A saved coordinator state has a format this version does not read (newer, or unknown)."""


class StorageUnavailableError(StorageError):
    """The shared store's URL cannot be used: unsupported protocol, no such bucket, wrong credentials,
    endpoint unreachable. Raised before anything starts, so the command fails fast."""

    exit_code = 2


class StorageFaultError(StorageError):
    """The shared store failed a read or write: disk full (ENOSPC), I/O error (EIO), stale NFS handle (ESTALE),
    an object store answering 5xx or unreachable. Not a bug of the task that hit it: workers back off and try
    again, and ``GET /api/v1/cluster`` shows the store unhealthy until a write succeeds."""


class PathOutsideRootError(StorageError):
    """A path taken from a message points outside the shared root."""


class ProtocolError(ParallelRLError):
    """A peer answered something that is not our protocol (garbage, wrong schema)."""

    status = None  # the HTTP status of the answer, when there was one


class AuthError(ProtocolError):
    """The cluster token was missing or wrong."""


class PeerUnavailableError(ProtocolError):
    """A peer could not be reached within the retry budget."""


class RemoteError(ProtocolError):
    """The peer answered with a typed JSON error."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code} (HTTP {status}): {message}")
        self.status = status
        self.code = code
        self.message = message


class ServiceRequestError(ParallelRLError):
    """A client command's request was refused by its server (the service or a coordinator: an unknown id, a config
    that does not compile) or the server could not be reached: bad input, said in one line."""

    exit_code = 2


class LearnerRankLostError(ParallelRLError):
    """A data-parallel learner rank died or a collective timed out; the aggregator restarts the group."""


class BindError(ConfigError):
    """A server cannot listen on its host and port: the port is taken (often a process of an earlier run still
    holds it) or the host is not an address of this machine."""


# ---- refusals of a request, raised by the domain (coordinator, protocol); the transport answers them as JSON
class RequestRefused(ParallelRLError):
    """A request or message the domain refuses. Views and the HTTP transport answer it as
    ``{"error": {"code": code, "message": str(exc)}}`` with ``http_status``; the domain itself never
    speaks HTTP."""

    http_status = 400
    code = "bad_request"

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class ProtocolViolation(RequestRefused):
    """A message does not follow the protocol (missing field, wrong type, value out of range, unknown type):
    the sender has a bug; the message is refused, nothing of its batch is applied."""


class ForbiddenError(RequestRefused):
    """The sender may not do this (a collector sending a learner's message, a task it does not own)."""

    http_status, code = 403, "forbidden"


class NotFoundError(RequestRefused):
    """The named worker, task or kind does not exist (or not with this lease)."""

    http_status, code = 404, "not_found"


class ConflictError(RequestRefused):
    """The request clashes with the current state (a worker already removed, a collector asking to sample)."""

    http_status, code = 409, "conflict"


class UnreachableError(RequestRefused):
    """A worker to be added cannot be reached or cannot prove it is one of ours (code ``unreachable`` or
    ``unproven``)."""

    http_status, code = 422, "unreachable"


class UnavailableError(RequestRefused):
    """The coordinator cannot take this now (overloaded, store fault): the sender keeps it and tries again."""

    http_status, code = 503, "unavailable"
