"""Pairs the torch family (torchvision, torchaudio, ...) with each side's torch.

Each member release is built for one torch and says so in its own metadata
(``Requires-Dist: torch (==2.13.0)``): a pin made for the baseline's torch cannot install
beside the candidate's. Before anything runs, every family member the user's requirements
name (directly, or as a dependency of a project they install) is matched against the torch
of each side, reading that metadata through pip with the user's own configuration, so the
indexes, find-links and constraints are the ones the install will use. A pin that cannot
match is refused in one line that names the release that does, unless ``--companions auto``
asks for that release to be installed instead.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from torchcanary.config_toml import tomllib
from torchcanary.errors import EnvSpecError

# The packages released in step with torch; their releases each name the torch they need.
FAMILY = (
    "torchvision",
    "torchaudio",
    "torchao",
    "triton",
    "torchtext",
    "torchdata",
    "torchrec",
    "torchtune",
    "torchcodec",
    "fbgemm-gpu",
)


class CompanionMismatchError(EnvSpecError):
    """A family member's pin cannot install beside one side's torch."""


@dataclass(frozen=True)
class Companion:
    """One family member as one side will have it.

    ``given``: the requirement as written; ``source``: where it was written (``--with``, a
    project's dependencies, the requirement set); ``version``: the release this side gets;
    ``build``: that release's own version string with its build label where the wheel says
    it (``0.28.0+cu130``); ``needs``: the torch that release requires; ``paired``: True when
    ``--companions auto`` replaced a pin that could not match.
    """

    name: str
    given: str
    source: str
    version: str
    build: str
    needs: str
    paired: bool

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Companion:
        return cls(**data)  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Release:
    version: str
    torch: SpecifierSet | None  # None: the release does not name torch
    build: str


def family_requirement(text: str) -> Requirement | None:
    """``text`` parsed, where it names a member of the family; None otherwise."""
    if text.startswith("-"):
        return None
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return None
    if requirement.url:  # a wheel or checkout the user chose: nothing to pick
        return None
    return requirement if canonicalize_name(requirement.name) in FAMILY else None


def project_dependencies(requirement: str, cwd: Path) -> tuple[str, list[str]] | None:
    """(the project's folder, its declared dependencies) for ``-e PATH`` or ``PATH``."""
    path_text = requirement.removeprefix("-e").strip()
    if not path_text or path_text.startswith("-") or "://" in path_text:
        return None
    folder = (cwd / path_text).resolve()
    pyproject = folder / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        project = tomllib.loads(pyproject.read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None  # pip will say what is wrong with it, in its own words
    return str(folder), [str(d) for d in project.get("dependencies", [])]


def pair(
    role: str,
    torch_version: str,
    requirements: Sequence[str],
    *,
    cwd: Path,
    mode: str,
    source: str,
) -> tuple[Companion, ...]:
    """Each family member in ``requirements`` (and in the projects among them) for
    ``torch_version``; raises :class:`CompanionMismatchError` for a pin that cannot match
    while ``mode`` is ``as-given``."""
    named: list[tuple[str, str]] = []
    for text in requirements:
        project = project_dependencies(text, cwd)
        if project is not None:
            named += [(dep, f"project {project[0]}") for dep in project[1]]
        else:
            named.append((text, source))
    companions = []
    for text, where in named:
        requirement = family_requirement(text)
        if requirement is not None:
            companions.append(_pair_one(role, torch_version, requirement, text, where, mode))
    return tuple(companions)


def _pair_one(
    role: str, torch_version: str, requirement: Requirement, given: str, source: str, mode: str
) -> Companion:
    name = canonicalize_name(requirement.name)
    torch = Version(torch_version)
    exact = _exact_version(requirement.specifier)
    chosen = _release(name, exact) if exact else _newest_match(name, torch, requirement.specifier)
    if chosen is not None and _fits(chosen, torch):
        return Companion(name, given, source, chosen.version, chosen.build, _needs(chosen), False)
    match = _newest_match(name, torch, SpecifierSet())
    if match is None:
        raise CompanionMismatchError(
            f"{given} ({source}) cannot install beside the {role}'s torch {torch_version}, and "
            f"no release of {name} on your indexes is made for it: drop {name} from the "
            "requirements or add an index that has one"
        )
    if mode != "auto":
        needs = f" needs torch {_needs(chosen)};" if chosen is not None and chosen.torch else ""
        raise CompanionMismatchError(
            f"{given} ({source}){needs} for the {role}'s torch {torch_version} use "
            f"{name}=={match.version}, or let torchcanary pair it with `--companions auto`"
        )
    return Companion(name, given, source, match.version, match.build, _needs(match), True)


def _exact_version(specifier: SpecifierSet) -> str | None:
    specs = list(specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def _fits(release: _Release, torch: Version) -> bool:
    return release.torch is None or release.torch.contains(torch, prereleases=True)


def _needs(release: _Release | None) -> str:
    if release is None or release.torch is None:
        return ""
    text = str(release.torch)
    return text.removeprefix("==") if re.fullmatch(r"==[^,]+", text) else text


def _newest_match(name: str, torch: Version, allowed: SpecifierSet) -> _Release | None:
    """The newest release ``allowed`` admits that is made for ``torch``; among builds of
    one version, the one with torch's own build label (``+cpu``) where the index has it."""
    versions = _versions(name)
    for version in versions:
        if version.local or not allowed.contains(version):
            continue
        same_build = Version(f"{version.public}+{torch.local}") if torch.local else None
        for candidate in ([same_build] if same_build in versions else []) + [version]:
            release = _release(name, str(candidate))
            if release is not None and _fits(release, torch):
                return release
    return None


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300
    )


@functools.cache
def _versions(name: str) -> tuple[Version, ...]:
    """Every version of ``name`` the configured indexes offer, newest first."""
    out = _pip("index", "versions", name, "--disable-pip-version-check")
    found = re.search(r"^Available versions: (.+)$", out.stdout, re.MULTILINE)
    versions = []
    for text in found.group(1).split(",") if found else []:
        try:
            versions.append(Version(text.strip()))
        except InvalidVersion:
            continue
    return tuple(sorted(versions, reverse=True))


@functools.cache
def _release(name: str, version: str) -> _Release | None:
    """What ``name==version`` requires of torch, read from its own metadata by pip (which
    also applies the user's constraints); None where pip cannot get that release."""
    out = _pip(
        "install", "--dry-run", "--no-deps", "--ignore-installed", "--quiet",
        "--report", "-", f"{name}=={version}",
    )  # fmt: skip
    if out.returncode != 0:
        return None
    try:
        item = json.loads(out.stdout)["install"][0]
    except (ValueError, LookupError):
        return None
    metadata = item.get("metadata", {})
    torch = None
    for text in metadata.get("requires_dist") or []:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == "torch" and not requirement.marker:
            torch = requirement.specifier
    url = str(item.get("download_info", {}).get("url", ""))
    found = str(metadata.get("version", version))
    return _Release(found, torch, _wheel_build(url, name) or found)


def _wheel_build(url: str, name: str) -> str | None:
    """The version with its build label (``0.28.0+cu130``) as a local wheel's own
    ``version.py`` states it: the index's metadata leaves the label out."""
    parsed = urlparse(url)
    if parsed.scheme != "file" or not parsed.path.endswith(".whl"):
        return None
    try:
        with zipfile.ZipFile(unquote(parsed.path)) as wheel:
            text = wheel.read(f"{name.replace('-', '_')}/version.py").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    found = re.search(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", text, re.MULTILINE)
    return found.group(1) if found else None


def torch_pin(requirements: Sequence[str]) -> str | None:
    """The version an exact ``torch==X`` pin in a requirement set names; None without one."""
    for text in requirements:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == "torch":
            return _exact_version(requirement.specifier)
    return None


def apply(requirements: Sequence[str], companions: Sequence[Companion]) -> list[str]:
    """``requirements`` with each pin that ``--companions auto`` replaced swapped for its
    pair (a project's own dependencies: :func:`install_order`)."""
    swapped = {c.given: c.pin for c in companions if c.paired}
    return [swapped.get(text, text) for text in requirements]


def install_order(
    requirements: Sequence[str], companions: Sequence[Companion], cwd: Path
) -> tuple[list[str], list[str]]:
    """What to install first, and what to install after it without dependencies.

    pip cannot install a project beside another version of a package the project pins, so a
    project whose pin was paired is installed in two steps: its dependencies (the pin
    swapped for its pair) with the other requirements, then the project alone.
    """
    requirements = apply(requirements, companions)
    paired = {(c.source, c.given): c.pin for c in companions if c.paired}
    first: list[str] = []
    without_deps: list[str] = []
    for text in requirements:
        project = project_dependencies(text, cwd)
        source = f"project {project[0]}" if project else ""
        if project is None or not any(key[0] == source for key in paired):
            first.append(text)
            continue
        first += [paired.get((source, dep), dep) for dep in project[1]]
        without_deps.append(text)
    return first, without_deps
