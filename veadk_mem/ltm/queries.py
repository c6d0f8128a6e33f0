"""The query file of `ltm search --queries`: one query a line, or JSONL objects, searched as a stream.

A line is either plain text (the query, for --user and --app) or a JSON object
`{"query": ..., "user": ..., "app": ..., "top_k": ...}` whose fields override the flags.
The whole file is checked before anything is searched, so a bad line costs nothing; stdin is
spooled to a private temporary file for that. A query holding a lone surrogate (`"\\ud800"`:
no UTF-8 encoding, so no embedder or store can take it, VeADK's included) is not searched:
its line carries the error and the rest run.

The file is then read again and searched a batch at a time (the batch's queries embedded
together), each result handed on as its query completes: memory holds one batch of queries
and one result, whatever the file's length.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from veadk_mem import jsonio
from veadk_mem.errors import BadInput
from veadk_mem.ltm.bounds import BATCH_BYTES
from veadk_mem.ltm.facade import SearchRequest

if TYPE_CHECKING:
    from veadk_mem.ltm.facade import LongTermMemory

BATCH_QUERIES = 256  # queries embedded together (the embedder cuts them into its own batches)
SPOOL_ERRORS = "surrogatepass"  # stdin's text, as it was decoded, kept exactly in the spool


@dataclass
class QueryFile:
    """A checked query file (stdin spooled), read again for its requests."""

    path: Path
    where: str
    user_id: str | None
    app_name: str | None
    count: int
    spooled: bool = False

    def requests(self) -> Iterator[SearchRequest]:
        """Every request, in file order (the file was checked already)."""
        with _open(self.path, self.spooled) as handle:
            for number, line in _lines(handle):
                if line.strip():
                    yield _request(line, self.where, number, self.user_id, self.app_name)

    def close(self) -> None:
        """Remove the spool of stdin."""
        if self.spooled:
            self.path.unlink(missing_ok=True)


def _open(path: Path, spooled: bool) -> IO[str]:
    return open(path, encoding="utf-8", errors=SPOOL_ERRORS if spooled else "strict")


def _lines(handle: Iterable[str]) -> Iterator[tuple[int, str]]:
    """(number, line) of a text, split as `str.splitlines` splits it, read a line at a time."""
    number = 0
    for raw in handle:
        for line in raw.splitlines():
            number += 1
            yield number, line


def open_queries(source: str, *, user_id: str | None, app_name: str | None) -> QueryFile:
    """Check every line of a query file ('-' for stdin); exit 2 naming the line and field of a bad one."""
    where = "stdin" if source == "-" else source
    spool: IO[str] | None = None
    path = Path(source)
    if source == "-":
        fd, name = tempfile.mkstemp(prefix="vmem-queries-", suffix=".txt")  # 0600
        path = Path(name)
        spool = os.fdopen(fd, "w", encoding="utf-8", errors=SPOOL_ERRORS)
    count = 0
    try:
        try:
            with contextlib.nullcontext(sys.stdin) if spool is not None else open(source, encoding="utf-8") as handle:
                for number, line in _lines(_copied(handle, spool)):
                    if line.strip():
                        _request(line, where, number, user_id, app_name)
                        count += 1
        except OSError as exc:
            raise BadInput(f"{source}: cannot read the query file: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise BadInput(f"{source}: the query file is not UTF-8 text") from None
        finally:
            if spool is not None:
                spool.close()
        if not count:
            raise BadInput(f"{where}: no queries (one a line, or JSONL objects with a 'query' field)")
    except BaseException:
        if spool is not None:
            path.unlink(missing_ok=True)
        raise
    return QueryFile(path, where, user_id, app_name, count, spooled=spool is not None)


def _copied(handle: IO[str], spool: IO[str] | None) -> Iterator[str]:
    """The handle's lines, each also written to the spool when there is one."""
    for raw in handle:
        if spool is not None:
            spool.write(raw)
        yield raw


def _request(line: str, where: str, number: int, user_id: str | None, app_name: str | None) -> SearchRequest:
    at = f"{where}: line {number}"
    if not line.lstrip().startswith("{"):
        if not user_id:
            raise BadInput(f"{at}: a plain query needs --user (or give JSONL lines with a 'user' field)")
        return SearchRequest(query=line.strip(), user_id=user_id, app_name=app_name or "")
    data: Any = jsonio.loads(line, where, line=number, finite=True)
    if not isinstance(data, dict):
        raise BadInput(f"{at}: not a JSON object")
    query, user, app, top_k = data.get("query"), data.get("user", user_id), data.get("app", app_name), data.get("top_k")
    if not isinstance(query, str) or not query.strip():
        raise BadInput(f"{at}: field 'query' must be a non-empty string")
    if not isinstance(user, str) or not user:
        raise BadInput(f"{at}: field 'user' must be a non-empty string (or give --user)")
    if app is not None and not isinstance(app, str):
        raise BadInput(f"{at}: field 'app' must be a string")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise BadInput(f"{at}: field 'top_k' must be a positive integer")
    request = SearchRequest(query=query, user_id=user, app_name=app or "", top_k=top_k)
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = f"\\u{ord(query[exc.start]):04x}"
        request.error = BadInput(f"{at}: the query holds a lone surrogate ({char}), not valid Unicode text: skipped")
    return request


def _batches(requests: Iterable[SearchRequest], batch_bytes: int) -> Iterator[list[SearchRequest]]:
    """The requests in groups of up to BATCH_QUERIES, or fewer whose queries reach `batch_bytes`."""
    batch: list[SearchRequest] = []
    size = 0
    for request in requests:
        batch.append(request)
        size += len(request.query)
        if len(batch) >= BATCH_QUERIES or size >= batch_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


async def search_each(
    ltm: LongTermMemory,
    requests: Iterable[SearchRequest],
    *,
    mode: str | None = None,
    batch_bytes: int = BATCH_BYTES,
    **options: Any,
) -> AsyncIterator[SearchRequest]:
    """Each request searched, in order, handed on as it completes (its `entries` or its `error`);
    the queries of a batch are embedded together first. A request's entries are let go once
    the consumer has taken it."""
    for batch in _batches(requests, batch_bytes):
        await ltm.prepare_searches(batch, mode=mode)
        for request in batch:
            await ltm.search_one(request, mode=mode, **options)
            yield request
            request.entries = []


@dataclass
class SearchTally:
    """What `--queries` reports after the results: how many ran and failed, the first failures."""

    searched: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (query, message), the first SHOWN
    failed: int = 0
    codes: set[int] = field(default_factory=set)

    SHOWN: ClassVar[int] = 5

    def add(self, request: SearchRequest) -> None:
        self.searched += 1
        if request.error is None:
            return
        self.failed += 1
        self.codes.add(getattr(request.error, "exit_code", 1))
        if len(self.failures) < self.SHOWN:
            self.failures.append((request.query, str(getattr(request.error, "message", request.error))))

    @property
    def exit_code(self) -> int:
        """0 when every query ran; the one failure's code when all failed alike; else 1."""
        if not self.failed:
            return 0
        return next(iter(self.codes)) if self.failed == self.searched and len(self.codes) == 1 else 1
