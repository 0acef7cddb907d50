"""Strip what must never leave the driver: passwords in URLs and secrets in the environment.

A Ray cluster runs (and may log) whatever it is sent, and results are stored; so a store URL
with a password, or a token in an environment variable, is removed at the boundary before a
unit is shipped and before a result is kept. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# Environment variable names that hold credentials by convention (AWS_SECRET_ACCESS_KEY,
# HF_TOKEN, PGPASSWORD, GITHUB_TOKEN, WANDB_API_KEY, ...).
_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|PASSWD|CREDENTIAL|API_?KEY|PRIVATE_?KEY|AUTH|COOKIE",
    re.IGNORECASE,
)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or query parameter name says it holds a secret."""
    return bool(_SECRET_NAME.search(name))


def strip_url(url: str) -> str:
    """The URL without its password and without query parameters that carry secrets.

    ``postgresql://canary:hunter2@db/runs?sslmode=require&token=abc`` becomes
    ``postgresql://canary@db/runs?sslmode=require``.
    """
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}@{hostport}" if user else hostport
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if not is_secret_name(k)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def strip_text(text: str) -> str:
    """Every URL inside free text (an error message, a command line) stripped."""
    return _URL.sub(lambda match: strip_url(match.group(0)), text)


def strip_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment without variables named like secrets, and URLs in values stripped."""
    return {name: strip_text(value) for name, value in env.items() if not is_secret_name(name)}


def strip_data(data: Any) -> Any:
    """A JSON-like value with secret-named keys dropped and every string's URLs stripped."""
    if isinstance(data, str):
        return strip_text(data)
    if isinstance(data, Mapping):
        return {
            key: strip_data(value)
            for key, value in data.items()
            if not (isinstance(key, str) and is_secret_name(key))
        }
    if isinstance(data, list | tuple):
        return [strip_data(item) for item in data]
    return data
