"""A TCP proxy in front of a store that goes away on a switch: the "store lost mid-command" tests.

`StoreProxy(port).start()` forwards 127.0.0.1:`proxy.port` to the store at `port`, byte for
byte, whatever the protocol (RESP, HTTP). Two switches make the store go away; from then on
the listening socket is closed (new connections are refused):

- `cut_when(condition)`: when a client starts a new request (its first bytes on a
  connection, or its first bytes after the store answered) and `condition()` is true (it
  asks the store itself, e.g. how many records it holds), that connection is reset, as is
  every other at its next request. Answers already on their way are delivered, so what a
  client was told is stored is what the store holds: a server shut down between requests.
- `cut_after(limit)`: after `limit` bytes from the clients, in the middle of a write.
  Nothing more reaches the store (a command cut in half never runs); the replies it still
  sends are relayed, what the client sends is dropped, and each connection closes after
  0.2 s of silence: to the client, the store is lost mid-write after acknowledging what it ran.

Not a mock of any client: the client's own socket sees the reset, the close and the refusal.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable


def _reset(sock: socket.socket) -> None:
    """Drop the connection now: shutdown wakes a thread still reading it (close alone would
    wait for that read), then close with SO_LINGER 0, as a crashed server's kernel answers."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class StoreProxy:
    """Forwards to 127.0.0.1:`target`; `cut_when` arms the switch that makes the store go away."""

    def __init__(self, target: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.condition: Callable[[], bool] | None = None
        self.limit: int | None = None
        self.sent = 0  # bytes forwarded from the clients to the store
        self.cut = threading.Event()
        self.requests = 0  # requests started through the proxy (first bytes after an answer)
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    def start(self) -> StoreProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def cut_when(self, condition: Callable[[], bool]) -> None:
        self.condition = condition

    def cut_after(self, limit: int) -> None:
        self.limit = limit

    def _accept(self) -> None:
        while not self.cut.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.cut.is_set():
                _reset(client)
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._sockets += [client, upstream]
            answered = threading.Event()
            answered.set()  # the first bytes of a connection start a request
            threading.Thread(target=self._requests, args=(client, upstream, answered), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, answered), daemon=True).start()

    def _tripped(self) -> bool:
        """Whether `cut_when`'s condition holds now (a count that raced a write is asked again later)."""
        try:
            return self.condition is not None and self.condition()
        except RuntimeError:  # e.g. a dict of the server's changed size while it was counted
            return False

    def _go_away(self) -> None:
        """Stop answering: refuse new connections from now on."""
        self.cut.set()
        _reset(self.listener)

    def _requests(self, client: socket.socket, upstream: socket.socket, answered: threading.Event) -> None:
        try:
            while data := client.recv(1 << 16):
                if self.limit is not None:
                    self._forward_until_limit(data, upstream)
                    continue
                if answered.is_set():  # a new request begins: the moment the switch is looked at
                    answered.clear()
                    with self._lock:
                        self.requests += 1
                        if not self.cut.is_set() and self._tripped():
                            self._go_away()
                    if self.cut.is_set():
                        break
                upstream.sendall(data)
        except OSError:
            pass
        _reset(client)
        _reset(upstream)

    def _forward_until_limit(self, data: bytes, upstream: socket.socket) -> None:
        """`cut_after`: forward what fits under the limit, then go away; later bytes are dropped."""
        assert self.limit is not None
        with self._lock:
            if self.cut.is_set():
                return
            room = self.limit - self.sent
            self.sent += len(data)
            if len(data) >= room:
                upstream.sendall(data[: max(room, 0)])
                self._go_away()
                return
        upstream.sendall(data)

    def _answers(self, upstream: socket.socket, client: socket.socket, answered: threading.Event) -> None:
        upstream.settimeout(0.2)
        try:
            while True:
                try:
                    data = upstream.recv(1 << 16)
                except TimeoutError:
                    if self.cut.is_set():  # gone: close once the store has said what it still had to
                        break
                    continue
                if not data:
                    break
                answered.set()  # before it reaches the client, which may start its next request at once
                client.sendall(data)
        except OSError:
            pass
        _reset(client)
        _reset(upstream)

    def stop(self) -> None:
        self._go_away()
        with self._lock:
            for sock in self._sockets:
                _reset(sock)
