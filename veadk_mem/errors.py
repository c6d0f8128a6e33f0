"""One error hierarchy for the whole tool; the CLI maps each class to an exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from json import JSONDecodeError


class VmemError(Exception):
    """Root of every error vmem reports to a user as a one-line message."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class StoreError(VmemError):
    """A store or API failed at run time (unreachable, refused, API error): exit 1."""

    exit_code = 1


class BadInput(VmemError):
    """Usage error or bad input (file, field, flag, config value): exit 2."""

    exit_code = 2


class NotFound(VmemError):
    """The named session, user, memory or file does not exist: exit 3."""

    exit_code = 3


class NotSupported(VmemError):
    """The configured backend cannot do what was asked: exit 4."""

    exit_code = 4


def missing_extra(package: str, extra: str) -> NotSupported:
    """The error for an optional SDK that is not installed, naming the extra to install."""
    return NotSupported(
        f"{package} is not installed",
        hint=f"install it with: pip install 'veadk-mem[{extra}]'",
    )


def invalid_json(where: str, exc: JSONDecodeError, line_offset: int = 0) -> BadInput:
    """The error for a JSON syntax error in `where`, naming its line and column."""
    reason = exc.msg.removesuffix(" at")  # json's messages end "... at" before the position
    reason = reason[:1].lower() + reason[1:]
    return BadInput(f"{where}: line {exc.lineno + line_offset}, column {exc.colno}: invalid JSON: {reason}")


class Interrupted(VmemError):
    """Ctrl-C stopped a command part-way; the message says what was already committed: exit 130."""

    exit_code = 130
