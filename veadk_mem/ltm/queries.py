"""The query file of `ltm search --queries`: one query a line, or JSONL objects.

A line is either plain text (the query, for --user and --app) or a JSON object
`{"query": ..., "user": ..., "app": ..., "top_k": ...}` whose fields override the flags.
The whole file is checked before anything is searched, so a bad line costs nothing. A
query holding a lone surrogate (`"\\ud800"`: no UTF-8 encoding, so no embedder or store
can take it, VeADK's included) is not searched: its line carries the error and the rest run.
"""

from __future__ import annotations

import sys
from typing import Any

from veadk_mem import jsonio
from veadk_mem.errors import BadInput
from veadk_mem.ltm.facade import SearchRequest


def read_queries(source: str, *, user_id: str | None, app_name: str | None) -> list[SearchRequest]:
    """The requests of a query file ('-' for stdin); exit 2 naming the line and field of a bad one."""
    try:
        if source == "-":
            lines = sys.stdin.read().splitlines()
        else:
            with open(source, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
    except OSError as exc:
        raise BadInput(f"{source}: cannot read the query file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{source}: the query file is not UTF-8 text") from None
    where = "stdin" if source == "-" else source
    requests = []
    for number, line in enumerate(lines, start=1):
        if line.strip():
            requests.append(_request(line, where, number, user_id, app_name))
    if not requests:
        raise BadInput(f"{where}: no queries (one a line, or JSONL objects with a 'query' field)")
    return requests


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
