"""What goes on the wire, and nothing about how it travels: JSON in and out, arrays packed in JSON, the cluster
token and the names of the headers and variables that carry it.

- :func:`encode_json` / :func:`loads`: JSON bytes out (non-finite floats as null) and JSON in (NaN, infinities
  and nesting too deep refused as ValueError).
- :func:`pack_array` / :func:`unpack_array` carry numeric arrays inside JSON as base64 bytes (hot paths:
  sampled references, priorities).
- :func:`field` / :func:`number_field` read a field of a parsed body, refusing a missing or mistyped one with
  :class:`~parallel_rl.errors.ProtocolViolation` (the server answers it 400).
- :func:`check_url`: a peer's address (``http://HOST:PORT``) from a body, parsed once, or ProtocolViolation.
- :func:`new_token`, :func:`token_from_env`, :func:`write_token_file` / :func:`token_from_file`,
  :func:`slave_proof`: the cluster token (from the environment, or the file `parallel-rl run` writes for the
  client commands) and the proof a slave gives of holding it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json as _json
import math
import os
import secrets
import tempfile
from typing import Any, Dict, Optional
from urllib.parse import urlsplit

import numpy as np

from ..errors import ConfigError, ProtocolViolation

TOKEN_ENV = "PARALLEL_RL_TOKEN"
COORDINATOR_ENV = "PARALLEL_RL_COORDINATOR"
# the lease token the coordinator gave a worker at connect; sent with every call the worker makes
LEASE_HEADER = "X-Parallel-RL-Lease"


def finite_json(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by None: JSON has no NaN, so they go as null.

    A diverging loss must reach the coordinator as ``null``, not kill the thread that sends it."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    if isinstance(value, np.generic):
        return finite_json(value.item())
    return value


def encode_json(value: Any) -> bytes:
    """JSON bytes of ``value``; non-finite floats become null (the fast path costs nothing when there are none)."""
    try:
        return _json.dumps(value, allow_nan=False).encode()
    except ValueError:  # a NaN or an infinity somewhere
        return _json.dumps(finite_json(value), allow_nan=False).encode()


def new_token() -> str:
    return secrets.token_urlsafe(24)


def token_from_env() -> Optional[str]:
    return os.environ.get(TOKEN_ENV) or None


def write_token_file(path: str, token: str) -> None:
    """Write ``token`` to ``path`` for the client commands (``--token-file``): readable by this user only
    (0600 from its creation: a temp file of ``mkstemp``), moved into place whole."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise


def token_from_file(path: str) -> str:
    """The token in ``path`` (``--token-file``, as `parallel-rl run` writes it); ConfigError naming the file."""
    try:
        with open(path) as f:
            token = f.read().strip()
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path, or bytes that are not text
        why = exc.strerror if isinstance(exc, OSError) else str(exc)
        raise ConfigError(
            f"--token-file {path!r}: cannot read it ({why}); pass the file `parallel-rl run` "
            f"printed (`token: in PATH`), or export {TOKEN_ENV}"
        ) from None
    if not token:
        raise ConfigError(
            f"--token-file {path} is empty; pass the file `parallel-rl run` printed "
            f"(`token: in PATH`), or export {TOKEN_ENV}"
        )
    return token


def slave_proof(token: str, challenge: str, address: str) -> str:
    """What a slave holding the cluster ``token`` answers to the coordinator's ``challenge`` on its health
    endpoint, reachable at ``address``: an HMAC, so the token itself never travels before the slave is
    proven. Bound to the address the slave advertises, so a server elsewhere cannot relay a real slave's
    answer as its own."""
    message = f"parallel_rl slave proof\n{challenge}\n{address}".encode()
    return hmac.new(token.encode(), message, hashlib.sha256).hexdigest()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON: send non-finite numbers as null")


def loads(data: Any) -> Any:
    """``data`` parsed as JSON: ValueError for anything that is not JSON, NaN and infinities included, and for
    arrays or objects nested too deep to parse (a RecursionError, which no caller expects, otherwise)."""
    try:
        return _json.loads(data, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("arrays or objects nested too deep") from None


def field(data: Dict[str, Any], name: str, kind: type | tuple, required: bool = True, default: Any = None) -> Any:
    """``data[name]`` checked against ``kind``; ProtocolViolation (answered 400) naming the field otherwise."""
    if name not in data or data[name] is None:
        if required:
            raise ProtocolViolation(f"missing field {name!r}")
        return default
    value = data[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ProtocolViolation(f"field {name!r} must be {'/'.join(k.__name__ for k in kinds)}, got bool")
    if not isinstance(value, kinds):
        raise ProtocolViolation(
            f"field {name!r} must be {'/'.join(k.__name__ for k in kinds)}, got {type(value).__name__}"
        )
    return value


def number_field(data: Dict[str, Any], name: str, default: float, lo: float = -math.inf, hi: float = math.inf) -> float:
    """``data[name]``, an int or a float, as a float in ``[lo, hi]``; ProtocolViolation (400) naming the field
    otherwise (an integer past float range included: ``float()`` of it raises OverflowError)."""
    value = field(data, name, (int, float), required=False, default=default)
    try:
        number = float(value)
    except OverflowError:
        number = math.nan
    if not lo <= number <= hi:
        raise ProtocolViolation(f"field {name!r} must be a number in [{lo:g}, {hi:g}], got {value!r:.40}")
    return number


def check_url(value: Any, name: str = "address") -> str:
    """``value``, a peer's address ``http(s)://HOST:PORT`` (a path allowed; a trailing ``/`` dropped), or
    ProtocolViolation (400) naming the field and the value: what :func:`urllib.parse.urlsplit` cannot parse (an
    IPv6 host without its ``]``), a port out of 1-65535 or not a number, no host, another scheme."""
    if not isinstance(value, str):
        raise ProtocolViolation(f"field {name!r} must be a string http://HOST:PORT, got {type(value).__name__}")
    try:
        parts = urlsplit(value)
        port = parts.port
        why = (
            "the scheme must be http or https"
            if parts.scheme not in ("http", "https")
            else "no host"
            if not parts.hostname
            else "no port"
            if port is None
            else "the port must be 1-65535"
            if port == 0
            else None
        )
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", "Port could not be cast ..."
        why = str(exc)
    if why is not None:
        raise ProtocolViolation(f"{name} must look like http://HOST:PORT, got {value!r:.200} ({why})")
    return value.rstrip("/")


PACKED_DTYPES = ("<i4", "<i8", "<f4", "<f8")


def pack_array(values: Any, dtype: str) -> Dict[str, str]:
    """A 1-D numeric array as a JSON object ``{"dtype": "<i8", "base64": "..."}`` of its little-endian bytes.

    Writing and parsing thousands of numbers as JSON text costs milliseconds;
    this costs microseconds. :func:`unpack_array` reads it back."""
    if dtype not in PACKED_DTYPES:
        raise ValueError(f"cannot pack dtype {dtype!r}; one of {PACKED_DTYPES}")
    raw = np.ascontiguousarray(values, dtype=dtype).reshape(-1).tobytes()
    return {"dtype": dtype, "base64": base64.b64encode(raw).decode("ascii")}


def unpack_array(value: Any, dtype: Any) -> np.ndarray:
    """A JSON list of numbers, or an array from :func:`pack_array`, as a 1-D array of ``dtype``.

    Raises ValueError for anything else (the caller answers 400)."""
    if isinstance(value, dict):
        packed = value.get("dtype")
        if packed not in PACKED_DTYPES or not isinstance(value.get("base64"), str):
            raise ValueError(
                f'a packed array is {{"dtype": one of {list(PACKED_DTYPES)}, "base64": str}}, got {sorted(value)}'
            )
        raw = base64.b64decode(value["base64"], validate=True)
        if len(raw) % np.dtype(packed).itemsize:
            raise ValueError(f"{len(raw)} bytes are not a whole number of {packed} values")
        return np.frombuffer(raw, dtype=packed).astype(dtype)
    if isinstance(value, list):
        try:
            array = np.asarray(value, dtype=dtype)
        except (TypeError, OverflowError) as exc:  # OverflowError: an integer past the dtype's range
            raise ValueError(str(exc)) from None
        if array.ndim != 1:
            raise ValueError(f"expected a flat list of numbers, got {array.ndim} dimensions")
        return array
    raise ValueError(f"expected a list of numbers or a packed array, got {type(value).__name__}")
