"""Secrets kept out of every message: URL passwords and tokens masked, known secret values replaced.

`mask_url` works on any text (an error message may quote a URL); `remember_secret` and
`remember_url_secrets` register the configured secrets (config.py does it on load) so
`redact`, the last line of defence before anything is printed, masks them wherever they
turn up. A URL is read with SQLAlchemy's `make_url`, which knows user info, quoting and
query parameters, rather than taken apart by hand.
"""

from __future__ import annotations

import re

_URL_PASSWORD = re.compile(r"(?P<head>[a-z0-9+]+://[^:/@]*:)(?P<pw>[^@]*)(?P<at>@)", re.IGNORECASE)
_URL_USER_INFO = re.compile(r"(?P<head>https?://)(?P<user>[^/@?#\s]+)(?P<at>@)", re.IGNORECASE)
# Query parameters drivers take secrets from: ?password= (asyncpg, aiomysql, psycopg), tokens, keys.
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:password|passwd|pwd|sslpassword|secret|client_secret|token|access_token|auth_token"
    r"|api[_-]?key|access[_-]?key|secret[_-]?key|sk|ak)=)(?P<value>[^&#\s'\"]*)",
    re.IGNORECASE,
)
_KNOWN_SECRETS: set[str] = set()


def remember_secret(value: str) -> None:
    """Register a secret value so `redact` masks it wherever it turns up (error text, tracebacks)."""
    if len(value) >= 6:  # shorter ones would mask ordinary words; URL patterns still mask them
        _KNOWN_SECRETS.add(value)
        from urllib.parse import quote

        _KNOWN_SECRETS.add(quote(value, safe=""))


def remember_url_secrets(url: str) -> None:
    """Register the password and the secret query parameters of a URL (not its host and port)."""
    if "://" not in url:  # a plain file path (sqlite) holds neither: no need to import SQLAlchemy for it
        return
    from sqlalchemy.engine.url import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return
    if parsed.password:
        remember_secret(str(parsed.password))
    for name, value in parsed.query.items():
        for one in (value,) if isinstance(value, str) else value:
            if _QUERY_SECRET.match(f"?{name}={one}"):
                remember_secret(one)


def mask_url(url: str) -> str:
    """A URL (or text holding URLs) with the password in its user info and query replaced by ****.

    An http(s) endpoint's whole user info is masked: it may be a token (MODEL_EMBEDDING_API_BASE).
    """
    url = _URL_USER_INFO.sub(lambda m: f"{m['head']}****{m['at']}", url)
    url = _URL_PASSWORD.sub(lambda m: f"{m['head']}****{m['at']}", url)
    return _QUERY_SECRET.sub(lambda m: f"{m['head']}****" if m["value"] else m[0], url)


def redact(text: str) -> str:
    """Text with URL passwords and every registered secret masked: the last line of defence."""
    text = mask_url(text)
    for secret in sorted(_KNOWN_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, "****")
    return text
