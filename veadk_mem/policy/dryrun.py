"""A dry run of a policy over sessions, for `vmem policy test` and `vmem ltm save --dry-run`."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from typing import Any

from veadk_mem.events import Session
from veadk_mem.jsonio import Streamed, dumps_pieces, finite
from veadk_mem.policy.decision import Decision, evaluate
from veadk_mem.policy.model import ResolvedPolicy, Warn


class DryRun:
    """A policy over one or more sessions, decided event by event each time it is read.

    The decisions are not kept: a session read from the store keeps its events on disk
    (`sessions/spooled.py`), and each pass reads them again, so memory stays flat at any
    session size. The first complete pass warns (unknown content fields, unencodable memories)
    and counts the summary."""

    def __init__(self, sessions: Iterable[Session], policy: ResolvedPolicy, *, warn: Warn | None = None) -> None:
        self.policy = policy
        self._sessions = list(sessions)
        self.session_ids = [s.id for s in self._sessions]
        self._warn = warn
        self._totals: tuple[int, int, int] | None = None  # (saved, events, bytes) after a whole pass

    def decisions(self) -> Iterator[Decision]:
        """Every decision, in event order, session after session."""
        warn = self._warn if self._totals is None else None
        saved = events = size = 0
        for session in self._sessions:
            for decision in evaluate(session.events, self.policy, warn=warn):
                decision.session_id = session.id
                events += 1
                if decision.memory is not None:
                    saved += 1
                    size += len(decision.memory.encode("utf-8", "surrogatepass"))
                    if warn is not None and not decision.memory.isascii():
                        _warn_unencodable(session.id, decision, warn)
                yield decision
        self._totals = (saved, events, size)

    @property
    def saved(self) -> list[str]:
        """The memory strings VeADK would save, session after session."""
        return [d.memory for d in self.decisions() if d.memory is not None]

    def summary(self) -> str:
        """`n saved / m events, b bytes` for people (a lone surrogate counted as its 3 bytes)."""
        if self._totals is None:
            for _ in self.decisions():
                pass
        assert self._totals is not None
        saved, events, size = self._totals
        sessions = f" in {len(self.session_ids)} sessions" if len(self.session_ids) > 1 else ""
        return f"{saved} saved / {events} events{sessions}, {size} bytes"

    def to_dict(self) -> dict[str, Any]:
        """The `vmem policy test --json` object of DESIGN.md."""
        decisions = list(self.decisions())
        return {
            "policy": self.policy.to_dict(),
            "saved": [d.memory for d in decisions if d.memory is not None],
            "events": [d.to_dict() for d in decisions],
        }

    def json_pieces(self) -> Iterator[str]:
        """`dumps(self.to_dict(), indent=2)` in pieces, from one pass over the events: the saved
        strings are written as they come and the events' entries wait in a private temporary file
        (compact JSON, a line each), so neither list is ever held whole."""
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="surrogatepass") as spool:

            def saved() -> Iterator[str]:
                for decision in self.decisions():
                    spool.write(json.dumps(decision.to_dict(), ensure_ascii=False) + "\n")
                    if decision.memory is not None:
                        yield decision.memory

            def events() -> Iterator[Any]:
                spool.seek(0)
                for line in spool:
                    yield json.loads(line)

            document = {
                "policy": finite(self.policy.to_dict()),
                "saved": Streamed(saved()),
                "events": Streamed(events()),
            }
            yield from dumps_pieces(document, indent=2)


def dry_run(sessions: Iterable[Session], policy: ResolvedPolicy, *, warn: Warn | None = None) -> DryRun:
    """Apply a policy to every event of every session, as VeADK's add_session_to_memory would.

    A kept memory with no UTF-8 encoding (a lone surrogate) stays saved, as VeADK keeps it,
    and is warned of: no store can hold it, so `ltm save` reports and skips that session.
    """
    return DryRun(sessions, policy, warn=warn)


def _warn_unencodable(session_id: str, decision: Decision, warn: Warn) -> None:
    """One warning when a memory string holds a lone surrogate (no UTF-8 encoding)."""
    assert decision.memory is not None
    try:
        decision.memory.encode("utf-8")
    except UnicodeEncodeError as exc:
        char = f"\\u{ord(decision.memory[exc.start]):04x}"
        warn(
            f"session {session_id}: event {decision.event.id}: the memory holds a lone surrogate ({char}):"
            " VeADK keeps it, but no store can hold it, so `ltm save` skips this session"
        )
