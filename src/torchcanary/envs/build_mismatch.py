"""Names a failure caused by a torch-family member built for another torch.

A torchvision made for another torch, or for the same torch in another build (the index's
CUDA build beside a ``+cpu`` torch), fails at import or at its first operator, in words that
read like a bug of its own: ``operator torchvision::nms does not exist``, an undefined
symbol in its extension, or its own version check. Every place that reports a failed run of
the user's code (the stack, the calls, bench workloads, drill jobs) passes the output here;
where it carries one of these signatures, the failure is reported as the mismatch it is,
with both builds and the fix.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

from torchcanary.envs.companions import FAMILY

# name -> [version with its build label, what the installed release requires of torch];
# read without importing anything, so a member that cannot import is still described.
_INSTALLED = """
import importlib.metadata as m, importlib.util as u, json, re, sys
found = {}
for name in sys.argv[1:]:
    try:
        version = m.version(name)
    except m.PackageNotFoundError:
        continue
    needs = [r for r in (m.requires(name) or []) if re.match(r"torch\\b(?![-_])", r)]
    try:
        spec = u.find_spec(name.replace("-", "_"))
        folder = (spec.submodule_search_locations or [None])[0] if spec else None
        text = open(folder + "/version.py").read() if folder else ""
    except (ImportError, OSError, ValueError):
        text = ""
    own = re.search(r"^__version__\\s*=\\s*['\\"]([^'\\"]+)", text, re.M)
    found[name] = [own.group(1) if own else version, needs[0] if needs else ""]
print(json.dumps(found))
"""

_MEMBERS = "|".join(re.escape(name).replace("-", "[-_]") for name in FAMILY)
_SIGNATURES = (
    re.compile(r"operator (?P<member>\w+)::\w+ does not exist"),
    re.compile(r"/(?P<member>" + _MEMBERS + r")/[^\s:]*\.so[^\s:]*: undefined symbol: \S+"),
    re.compile(
        r"PyTorch and (?P<member>" + _MEMBERS + r") were compiled with different CUDA[^\n]*"
    ),
    re.compile(
        r"(?P<member>" + _MEMBERS + r")[^\n]{0,80}\b(?:requires|is not compatible with|"
        r"was (?:compiled|built) (?:for|against)) (?:torch|PyTorch)[^\n]*",
        re.IGNORECASE,
    ),
)


@dataclass(frozen=True)
class Installed:
    """One package as an environment has it: ``build`` is its version with the build label
    its own ``version.py`` gives (``0.28.0+cu130``); ``needs`` its requirement on torch."""

    build: str
    needs: str = ""


def installed_family(python: str) -> dict[str, Installed]:
    """torch and each family member installed where ``python`` runs; {} if it cannot say."""
    try:
        out = subprocess.run(
            [python, "-c", _INSTALLED, "torch", *FAMILY],
            capture_output=True,
            text=True,
            timeout=60,
        )
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {}
    return {name: Installed(build, needs) for name, (build, needs) in found.items()}


def mismatch_in(output: str, python: str) -> str | None:
    """:func:`recognise` against what ``python``'s environment has installed, read only
    where ``output`` carries a signature (most failures are no mismatch)."""
    if not any(signature.search(output) for signature in _SIGNATURES):
        return None
    return recognise(output, installed_family(python))


def recognise(output: str, family: Mapping[str, Installed]) -> str | None:
    """A sentence naming the mismatch ``output`` shows, with both builds and the fix;
    None where the output carries no signature of one or the member is not installed."""
    for signature in _SIGNATURES:
        found = signature.search(output)
        if found is None:
            continue
        member = found.group("member").replace("_", "-").lower()
        if member not in family or "torch" not in family:
            continue
        return _sentence(member, family[member], family["torch"].build, found.group(0).strip())
    return None


def _sentence(member: str, installed: Installed, torch_build: str, evidence: str) -> str:
    head = (
        f"build mismatch: {member} {installed.build} is not built for this side's torch "
        f"{torch_build} ({evidence[:160]})"
    )
    try:
        torch_version = Version(torch_build)
        own = Version(installed.build)
        requirement = Requirement(installed.needs) if installed.needs else None
    except (InvalidVersion, InvalidRequirement):
        return f"{head}; install the {member} made for torch {torch_build}"
    if requirement is not None and not requirement.specifier.contains(
        torch_version, prereleases=True
    ):
        return (
            f"{head}; it needs {requirement}: install the {member} release made for torch "
            f"{torch_version.public}, or let torchcanary pair it with `--companions auto`"
        )
    torch_label = torch_version.local or "default"
    own_label = own.local or "default"
    return (
        f"{head}; the releases match but the builds differ ({member} {own_label}, torch "
        f"{torch_label}): install {member} {own.public} in the {torch_label} build, from the "
        f"index torch {torch_build} came from"
    )
