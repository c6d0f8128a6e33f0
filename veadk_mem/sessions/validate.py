"""Reading an import file's records, each checked: the import's check pass, its write pass
(in this process or in `import_child.py`'s child) and `upgrade`'s file check read through here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veadk_mem.errors import BadInput
from veadk_mem.sessions.checks import check_record

if TYPE_CHECKING:
    from veadk_mem.sessions.limits import Limits
    from veadk_mem.sessions.rawsession import RawSession


def iter_checked(
    source: str | Path,
    name: str | None = None,
    limits: Limits | None = None,
    *,
    big: str | None = None,
    columns: bool = False,
    big_bytes: int | None = None,
) -> Iterator[tuple[str, Any]]:
    """(where, record) for each session and app_state / user_state record, validated.

    With `limits`, also every value the target database would refuse at write time.
    `big` streams JSONL lines of `big_bytes` (`bigline.big_line_bytes()`) and more instead of decoding
    them: "check" checks such a line and gives a `bigline.BigSession` (its events spooled:
    the caller removes the spool, `BigSession.remove_spool`), "skip" only locates
    it (a `bigline.BigLine`: the write pass, after the check pass checked it); `columns`
    spools a checked one's events as row columns (`bigline.check_big`). Without it,
    a record is a RawSession or a state record dict.
    """
    from veadk_mem.events import iter_documents
    from veadk_mem.sessions import bigline

    limit = bigline.big_line_bytes() if big_bytes is None else big_bytes
    documents = bigline.iter_lines(source, name, limit) if big else None
    for where, data in documents or iter_documents(source, name):
        try:
            if isinstance(data, bigline.BigLine):
                checked = big == "check"
                yield where, (bigline.check_big(data, limits, spool=True, columns=columns) if checked else data)
            else:
                yield check_record(where, data, limits)
        except RecursionError:
            raise BadInput(f"{where}: JSON nested too deeply") from None


def iter_import_records(source: str | Path, name: str | None = None) -> Iterator[RawSession | dict[str, Any]]:
    """Sessions and app_state / user_state records of a JSON, JSON list or JSONL file, validated."""
    for _, record in iter_checked(source, name):
        yield record


def validate_import(source: str | Path, name: str | None = None) -> int:
    """Check every record of an export file; BadInput naming the line of the first bad one. Returns the count."""
    return sum(1 for _ in iter_checked(source, name))
