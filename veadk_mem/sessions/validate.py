"""Reading an import file's records, each checked: the import's check pass, its write pass
and `upgrade`'s file check read through here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput
from veadk_mem.sessions import bigline
from veadk_mem.sessions.bigline import BigSession
from veadk_mem.sessions.checks import check_record, check_times_record, fast_paths

if TYPE_CHECKING:
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.rawsession import RawSession


def iter_checked(
    source: str | Path,
    name: str | None = None,
    limits: Limits | None = None,
    *,
    big: str | None = None,
    big_bytes: int | None = None,
) -> Iterator[tuple[str, Any]]:
    """(where, record) for each session and app_state / user_state record, validated.

    With `limits`, also every value the target database would refuse at write time.
    `big` streams JSONL lines of `big_bytes` (`bigline.big_line_bytes()`) and more instead of decoding
    them: "check" checks such a line and gives a `bigline.BigSession` (its events spooled:
    the caller removes the spool, `BigSession.remove_spool`), "skip" only locates
    it (a `bigline.BigLine`: the write pass, after the check pass checked it). Without it,
    a record is a RawSession or a state record dict.
    """
    from veadk_mem.events import TIMES_KIND, iter_documents
    from veadk_mem.sessions.rawsession import RawSession

    limit = bigline.big_line_bytes() if big_bytes is None else big_bytes
    fast = fast_paths()
    documents = bigline.iter_lines(source, name, limit) if big else None
    times: tuple[tuple[str, str, str], float] | None = None  # the session_times line just read
    for where, data, size in documents or ((where, data, 0) for where, data in iter_documents(source, name)):
        try:
            if isinstance(data, dict) and data.get("kind") == TIMES_KIND:
                times = check_times_record(data, where)
                continue
            found: tuple[str, Any]
            if isinstance(data, bigline.BigLine):
                checked = big == "check"
                found = where, bigline.check_big(data, limits, spool=True) if checked else data
            else:
                found = check_record(where, data, limits, fast)
        except RecursionError:
            raise BadInput(f"{where}: JSON nested too deeply") from None
        _given_times(found[1], times)
        times = None
        if isinstance(found[1], RawSession):
            found[1].size = size
        yield found


def _given_times(record: Any, times: tuple[tuple[str, str, str], float] | None) -> None:
    """The create time of the session_times line before a session, on that session (a line of
    another session's key, or of none, gives nothing; a located long line gets it in its check pass)."""
    from veadk_mem.sessions.rawsession import RawSession

    if times is None or not isinstance(record, (RawSession, BigSession)):
        return
    key, created = times
    if key != (record.app_name, record.user_id, record.id):
        return
    if isinstance(record, BigSession):
        record.given_create_time = created
    else:
        record.create_time = created


def iter_import_records(source: str | Path, name: str | None = None) -> Iterator[RawSession | dict[str, Any]]:
    """Sessions and app_state / user_state records of a JSON, JSON list or JSONL file, validated."""
    for _, record in iter_checked(source, name):
        yield record


def validate_import(source: str | Path, name: str | None = None) -> int:
    """Check every record of an export file; BadInput naming the line of the first bad one. Returns the count."""
    return sum(1 for _ in iter_checked(source, name))
