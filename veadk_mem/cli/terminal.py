"""Terminal safety: text from users and models made harmless to print (escape sequences and
control characters made visible), and the pipe-safe writer every byte of output goes through.
"""

from __future__ import annotations

import re
from typing import IO, Any

# C0 controls but tab and newline, DEL, C1 controls (0x9b is a one-byte CSI), the
# bidirectional overrides and isolates that reorder what a terminal shows, and lone
# surrogates (no UTF-8 encoding: printed raw, they fail the write).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(value: Any) -> Any:
    """`value` with escape sequences and control characters made visible (\\x1b), for people.

    Memory text, authors, ids and state come from users and models: printed raw, an ESC
    sequence could clear the screen, retitle the terminal, hide rows or reorder what the
    operator reads. The renderer applies this to every cell, title and message it prints for
    people (JSON escapes them by construction); lists and dicts are cleaned item by item.
    """
    if isinstance(value, str):
        return _UNSAFE.sub(_visible, value)
    if isinstance(value, list):
        return [terminal_safe(v) for v in value]
    if isinstance(value, dict):
        return {terminal_safe(k): terminal_safe(v) for k, v in value.items()}
    return value


def terminal_text(text: str) -> str:
    """One string with escape sequences and control characters made visible (\\x1b)."""
    return _UNSAFE.sub(_visible, text)


def safe_text(text: str | None) -> str | None:
    """`terminal_text` of a text that may be missing (a title)."""
    return None if text is None else _UNSAFE.sub(_visible, text)


WRITE_CHUNK = 1 << 16  # bytes per write: a pipe takes 64 KiB at a time


def write_text(out: IO[str], text: str) -> None:
    """Write `text` whole and flush, so that a reader that went away ends the run with 141.

    Unbuffered (PYTHONUNBUFFERED, `python -u`) stdout's binary layer is the raw file, whose
    write may take part of the bytes when the pipe's reader leaves mid-write, and the text
    layer reports that as success: the rest was lost and vmem exited 0. The bytes go to the
    binary layer here, and what a write did not take is written again, which raises
    BrokenPipeError (the app's exit 141: `vmem ... --json | head`).
    """
    binary = getattr(out, "buffer", None)
    if binary is None:  # a text stream of the program's own (tests, StringIO)
        out.write(text)
        out.flush()
        return
    out.flush()  # what went through the text layer first stays first
    encoding, errors = getattr(out, "encoding", None) or "utf-8", getattr(out, "errors", None) or "strict"
    data = memoryview(text.encode(encoding, errors))
    while data:
        written = binary.write(data[:WRITE_CHUNK])
        if written is None:  # a non-blocking stdout that is full: wait until it takes more
            import select

            select.select([], [binary], [])
            continue
        data = data[written:]
    binary.flush()


def wrap_words(text: str, width: int, *, indent: str = "  ") -> str:
    """Text wrapped at `width` between words only: a word longer than the line (a URL, a
    path, a flag) stands alone on its line rather than being split."""
    import textwrap

    return "\n".join(
        textwrap.fill(
            line,
            width=max(width, len(indent) + 10),
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        or line
        for line in text.splitlines() or [""]
    )


def isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
