"""Which source files are the user's: where a recorded call's site may lie.

A torch call made inside a third-party dependency (an installed package that calls torch
for the user) happened at the user's line that called that package, so the site is the
nearest frame in the user's code: the suite's own files and the projects given with
``--with``, wherever they are installed. The section names them in
``TORCHCANARY_USER_CODE`` as JSON ``{"paths": [...], "names": [...]}`` (folders, and
distribution names); here each becomes the folders its code lies in: a distribution's
top-level packages and modules, and the folder it was installed from (a local path,
editable or not), though not an installed package's folder below it (a virtual environment
in the project's folder). A file under none of them is the user's unless it lies in an
installed package's folder (``site-packages``, ``dist-packages``) or the standard library.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sysconfig
from collections.abc import Iterable
from urllib.parse import unquote, urlparse

from torchcanary.worker.calls import CALLS_USER_CODE_VAR

_INSTALLED = (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}")


def _installed_from(distribution: importlib.metadata.Distribution) -> str | None:
    """The local folder a distribution was installed from (``direct_url.json``), if any."""
    text = distribution.read_text("direct_url.json")
    if not text:
        return None
    try:
        url = urlparse(json.loads(text).get("url", ""))
    except (ValueError, AttributeError):
        return None
    return os.path.realpath(unquote(url.path)) if url.scheme == "file" else None


def _code_of(distribution: importlib.metadata.Distribution) -> set[str]:
    """The folders (or module files) a distribution's code lies in."""
    found = set()
    for file in distribution.files or ():
        top = file.parts[0] if file.parts else ""
        if not top or top.endswith((".dist-info", ".egg-info", ".pth")) or top == "..":
            continue
        found.add(os.path.realpath(str(distribution.locate_file(top))))
    source = _installed_from(distribution)
    if source is not None:
        found.add(source)
    return found


def _name(distribution: importlib.metadata.Distribution) -> str:
    return str(distribution.metadata["Name"] or "").lower().replace("_", "-")


class UserCode:
    """The roots of the user's code; tells the user's files from a dependency's."""

    def __init__(self, paths: Iterable[str] = (), names: Iterable[str] = ()) -> None:
        folders = {os.path.realpath(path) for path in paths}
        wanted = {name.lower().replace("_", "-") for name in names}
        if folders or wanted:
            for distribution in importlib.metadata.distributions():
                source = _installed_from(distribution)
                if _name(distribution) in wanted or (source is not None and source in folders):
                    folders |= _code_of(distribution)
        self._roots = tuple(sorted(root.rstrip(os.sep) for root in folders))
        stdlib = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib")}
        self._library = tuple(os.path.realpath(path) + os.sep for path in stdlib)
        self._owned: dict[str, bool] = {}

    @classmethod
    def from_environment(cls) -> UserCode:
        """The user's code as the section named it (none named: only what is not installed)."""
        named = json.loads(os.environ.get(CALLS_USER_CODE_VAR) or "{}")
        return cls(named.get("paths", ()), named.get("names", ()))

    def owns(self, filename: str) -> bool:
        """Whether ``filename`` is the user's code (remembered: asked once per frame)."""
        known = self._owned.get(filename)
        if known is None:
            known = self._owned[filename] = self._decide(filename)
        return known

    def _decide(self, filename: str) -> bool:
        path = os.path.realpath(filename) if os.path.isabs(filename) else filename
        for root in self._roots:
            # a virtual environment inside the project folder holds dependencies, not its code
            if path == root or (
                path.startswith(root + os.sep) and not _installed(path[len(root) :])
            ):
                return True
        return not (_installed(path) or path.startswith(self._library))


def _installed(path: str) -> bool:
    return any(folder in path for folder in _INSTALLED)
