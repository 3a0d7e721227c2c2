"""The HTTP transport: the ground floor every peer (coordinator, slaves, the CLI's client) stands on.

It imports nothing of parallel_rl but :mod:`parallel_rl.errors`, so any layer may use it.

- :mod:`.codec`: what goes on the wire (JSON, packed arrays, token, header names); no sockets.
- :mod:`.server`: :class:`ServerThread`, JSON errors, token checks, request bodies (Flask on cheroot).
- :mod:`.connections`: cheroot's connection handling with a connection cap and request deadlines.
- :mod:`.client`: :class:`HttpClient`, JSON calls with timeouts and bounded retries.
"""

from .client import MAX_ANSWER_BYTES, HttpClient
from .codec import (
    COORDINATOR_ENV,
    LEASE_HEADER,
    PACKED_DTYPES,
    TOKEN_ENV,
    check_url,
    encode_json,
    field,
    finite_json,
    loads,
    new_token,
    number_field,
    pack_array,
    slave_proof,
    token_from_env,
    token_from_file,
    unpack_array,
    write_token_file,
)
from .server import (
    WILDCARD_HOSTS,
    ApiError,
    ServerThread,
    check_token,
    error_response,
    http_url,
    install_json_errors,
    json_body,
    route_address,
)

__all__ = [
    "ApiError",
    "COORDINATOR_ENV",
    "HttpClient",
    "check_url",
    "LEASE_HEADER",
    "MAX_ANSWER_BYTES",
    "PACKED_DTYPES",
    "ServerThread",
    "TOKEN_ENV",
    "check_token",
    "encode_json",
    "error_response",
    "field",
    "finite_json",
    "install_json_errors",
    "json_body",
    "loads",
    "new_token",
    "number_field",
    "pack_array",
    "slave_proof",
    "token_from_env",
    "token_from_file",
    "unpack_array",
    "write_token_file",
    "WILDCARD_HOSTS",
    "http_url",
    "route_address",
]
