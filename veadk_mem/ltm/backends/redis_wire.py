"""The one place vmem reaches below redis-py's public commands: framed HSETs on a pooled connection.

A batch of HSETs is written in one send and its replies read back, as a redis-py pipeline
would, but framed here (RESP is a length-prefixed list of byte strings) because redis-py's
pure-Python packing of 8 fields per hash cost more than the round trip it saves. That takes
redis-py's connection-pool and connection internals (`ConnectionPool.get_connection`,
`release`, `Connection.send_packed_command`, `read_response`, `disconnect`), which are not
a documented API: written for redis-py 5.0.8 to 8.x (pyproject caps it below 9), and
tests/test_ltm_redis.py::test_the_pool_internals_are_those_redis_wire_was_written_for pins
that range and those names, so a new redis-py fails that test before it fails a save.
"""

from __future__ import annotations

from typing import Any

WRITTEN_FOR = ((5, 0, 8), (9, 0, 0))  # redis-py versions, lowest tested to first untested
POOL_CALLS = ("get_connection", "release")
CONNECTION_CALLS = ("send_packed_command", "read_response", "disconnect")


def resp(*args: bytes | str) -> bytes:
    """One command in RESP: `*N`, then `$len` and the bytes of each argument."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode("utf-8") if isinstance(arg, str) else arg
        out += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(out)


async def send_hsets(client: Any, mappings: list[tuple[str, dict[str, Any]]], acked: list[int]) -> None:
    """Every HSET of a batch in one write, then their replies: one round trip; acked[0]
    counts the replies read, so a failure part-way knows what the server stored.

    A connection whose replies were not all read is dropped, never returned to the pool.
    """
    pool = client.connection_pool
    try:
        conn = await pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        conn = await pool.get_connection("HSET")
    pending = len(mappings)
    try:
        payload = b"".join(resp(b"HSET", key, *[x for kv in m.items() for x in kv]) for key, m in mappings)
        await conn.send_packed_command(payload, check_health=True)
        while pending:
            await conn.read_response()
            pending -= 1
            acked[0] += 1
    finally:
        if pending:
            await conn.disconnect()
        await pool.release(conn)
