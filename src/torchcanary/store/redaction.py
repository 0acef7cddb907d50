"""A store URL's password, and the one place that hides it.

A URL may carry a password (``postgresql://user:secret@host/db`` or ``?password=...``).
Every message, report and log line that names a store goes through
``ResultStore.location`` or ``redact``, so no secret is printed or written; the store
modules and the CLI all take it from here, below each of them.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

HIDDEN = "***"
_ANY_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
# A URL's user part whose password was pasted without percent-encoding ("/", "#", " ",
# "'" or "@" in it): everything from the user's ":" to the "@" before a host is the
# password, so none of it survives (hiding a little too much beats showing any of it).
_CREDENTIALS = re.compile(
    r"\b(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*):(?P<password>[^\n]{1,200}?)"
    r"@(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?=[:/?#\s'\"]|$)"
)


def url_password(url: str) -> str | None:
    """The password a URL carries, in its user part (encoded or not) or its query, if any."""
    pasted = _CREDENTIALS.search(url)
    if pasted:
        return pasted["password"]
    parts = urlsplit(url)
    if parts.password:
        return parts.password
    return dict(parse_qsl(parts.query)).get("password")


def redact(text: str) -> str:
    """``text`` with the password of any URL in it (a store's or not) replaced by ``***``,
    encoded or not."""
    text = _CREDENTIALS.sub(lambda m: f"{m['head']}:{HIDDEN}@{m['host']}", text)
    return _ANY_URL.sub(lambda m: _redact_url(m.group(0)), text)


def _redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL after all (e.g. a bad port): hide all of its user part
        head, at, tail = url.rpartition("@")
        return f"{head.split('://', 1)[0]}://{HIDDEN}@{tail}" if at else url
    netloc = parts.netloc
    if password is not None:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{HIDDEN}@{hostport}"
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(key == "password" for key, _ in pairs):
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    query = urlencode([(k, HIDDEN if k == "password" else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(message: str, url: str) -> str:
    """A driver's error message as one line, with no trace of the URL's password."""
    password = url_password(url)
    if password:
        message = message.replace(password, HIDDEN)
    return " ".join(redact(message).split())
