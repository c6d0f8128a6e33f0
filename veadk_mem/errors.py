"""One error hierarchy for the whole tool; the CLI maps each class to an exit code."""

from __future__ import annotations

from typing import Any


class VmemError(Exception):
    """Root of every error vmem reports to a user as a one-line message."""

    exit_code = 1
    # What a command had committed before this error stopped it (counts by name, and "ids"),
    # for the history (ops/history.py); None: nothing is known to be committed.
    committed: dict[str, Any] | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class StoreError(VmemError):
    """A store or API failed at run time (unreachable, refused, API error): exit 1."""

    exit_code = 1


class StoreUnreachable(StoreError):
    """The store could not be reached, or the connection went away mid-command: every
    following call would fail the same way, so bulk work stops at the first."""


class PartialWrite(StoreError):
    """A save failed part-way: `stored` are the ids the store acknowledged before it failed.

    `lost` says the connection went away (the store is unreachable, not refusing one
    batch): a bulk write stops there instead of failing every following batch the same way.
    """

    def __init__(self, message: str, *, stored: list[str], lost: bool, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.stored = stored
        self.lost = lost


class StoreAuthError(StoreError):
    """The store refused the credentials (401/403, a wrong password): exit 1, retrying will not help."""


class StoreThrottled(StoreError):
    """The store still rate limits or the quota is spent after the retries: exit 1."""


class StoreRejected(StoreError):
    """The store refused the request itself (a 4xx other than auth, rate limit or not found): exit 1."""


class BadInput(VmemError):
    """Usage error or bad input (file, field, flag, config value): exit 2."""

    exit_code = 2


class NotFound(VmemError):
    """The named session, user, memory or file does not exist: exit 3."""

    exit_code = 3


class NotSupported(VmemError):
    """The configured backend cannot do what was asked: exit 4."""

    exit_code = 4


class MissingSdk(NotSupported):
    """The configured backend's SDK (or a piece of it) is not installed: exit 4, with the install line.

    `vmem doctor` fails its check on this one (exit 4) rather than skipping it: the store the
    configuration names cannot be used at all until it is installed.
    """


def missing_extra(package: str, extra: str) -> NotSupported:
    """The error for an optional SDK that is not installed, naming the extra to install."""
    return MissingSdk(
        f"{package} is not installed",
        hint=f"install it with: pip install 'veadk-mem[{extra}]'",
    )


class Interrupted(VmemError):
    """Ctrl-C stopped a command part-way; the message says what was already committed: exit 130."""

    exit_code = 130
