"""What a server lets clients without the cluster token hold (issue #41): the one check of the token
(:func:`bearer_refusal`, asked by the views' ``check_token`` and by the connection layer before it reads a body), and
the budget of bytes read ahead and of connections per address for connections that have not shown it
(:class:`ReadAhead`, kept by :class:`~parallel_rl.transport.connections.Server`)."""

from __future__ import annotations

import hmac
import threading
from typing import Any, Dict, Optional

# a connection of transport.connections (its peer, proven, busy, was_cut, request_started and cut())
Connection = Any


def bearer_refusal(authorization: str, expected: str) -> Optional[tuple]:
    """Why a request whose ``Authorization`` header is ``authorization`` may not act as a token holder, as
    ``(status, code, message)``: 401 without a bearer token, 403 with a wrong one (compared in constant time);
    None when it carries ``expected``. The one check of the cluster token: the app's views (``check_token``) and
    the connection layer (a body is read only from a token holder) both ask it."""
    scheme, _, given = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return 401, "unauthorized", "missing cluster token: send 'Authorization: Bearer <PARALLEL_RL_TOKEN>'"
    if not hmac.compare_digest(given.strip().encode(errors="replace"), expected.encode()):
        return 403, "forbidden", "wrong cluster token: use the coordinator's PARALLEL_RL_TOKEN"
    return None


class ReadAhead:
    """What a server holds for connections that have not shown the cluster token (a stranger's, or a worker's
    before its first request's head is whole): the bytes read ahead of the parser, within one ``budget`` for all of
    them, and the connections one address may hold, at most ``max_per_peer``.

    A connection is *proven* once a request head carried the token (for the rest of its life): its bytes and its
    place no longer count. Past the budget, the connections holding the oldest unfinished heads are cut (a client
    trickling its head goes first, a worker's head, whole in a millisecond, last); when nothing can be cut, the
    connection reading is. Without a token configured (an open server) nothing is ever proven."""

    def __init__(self, token: Optional[str], budget: int, max_per_peer: int):
        self.token = token or None
        self.budget = int(budget)
        self.max_per_peer = int(max_per_peer)
        self.held = 0  # bytes read ahead for unproven connections
        self._lock = threading.Lock()
        self._holders: Dict[Connection, int] = {}  # unproven connection -> the bytes it holds
        self._peers: Dict[str, int] = {}  # address -> its unproven connections open

    def admit(self, conn: Connection, peer: Optional[str]) -> bool:
        """Count a new connection against its address; False (close it) when the address holds its most."""
        if peer is None:
            return True
        with self._lock:
            if self._peers.get(peer, 0) >= self.max_per_peer:
                return False
            self._peers[peer] = self._peers.get(peer, 0) + 1
            conn.peer = peer
            return True

    def prove(self, conn: Connection) -> None:
        """``conn`` carried the token: it holds nothing against the budget or its address from now on."""
        with self._lock:
            conn.proven = True
            self.held -= self._holders.pop(conn, 0)
            self._leave_peer(conn)

    def forget(self, conn: Connection) -> None:
        """``conn`` closed."""
        with self._lock:
            self.held -= self._holders.pop(conn, 0)
            self._leave_peer(conn)

    def _leave_peer(self, conn: Connection) -> None:
        if conn.peer is not None:
            left = self._peers.get(conn.peer, 1) - 1
            if left > 0:
                self._peers[conn.peer] = left
            else:
                self._peers.pop(conn.peer, None)
            conn.peer = None

    def hold(self, conn: Connection, size: int) -> bool:
        """Count ``size`` bytes read ahead for ``conn`` (its whole ``pending``); False when they do not fit in
        the budget even after cutting the connections holding the oldest heads."""
        if conn.proven:
            return True
        with self._lock:
            change = size - self._holders.get(conn, 0)
            if change > 0 and self.held + change > self.budget:
                # cut an eighth of the budget more than needed: a scan per arriving byte would cost
                self._cut(self.held + change - self.budget + self.budget // 8, keep=conn)
                if self.held + change > self.budget:
                    return False
            self.held += change
            if size:
                self._holders[conn] = size
            else:
                self._holders.pop(conn, None)
            return True

    def _cut(self, need: int, keep: Connection) -> None:
        waiting = [c for c in self._holders if c is not keep and not c.busy]
        for conn in sorted(waiting, key=lambda c: c.request_started or 0.0):
            if need <= 0:
                break
            size = self._holders.pop(conn)
            self.held -= size
            need -= size
            conn.cut()

    def enter(self, conn: Connection) -> bool:
        """A thread takes ``conn``: False when it was cut meanwhile (the thread closes it)."""
        with self._lock:
            conn.busy = not conn.was_cut
            return conn.busy

    def leave(self, conn: Connection) -> None:
        with self._lock:
            conn.busy = False
