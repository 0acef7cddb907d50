"""The wheel is what it says it is: version and git hash, build variant, C++ ABI, math libraries.

Each probe reads the installed build itself (``torch.version``, ``torch.__config__``,
``torch.backends``) and compares what the build reports with what was asked for and with
what the build's own configuration says, so a mislabelled or broken wheel disagrees.
"""

from __future__ import annotations

import re
from typing import Any

from torchcanary.probe import Probe, ProbeContext, confirmed, not_checkable, refuted
from torchcanary.probe_result import Outcome

_GIT_HASH = re.compile(r"^[0-9a-f]{40}$")
_LOCAL_CUDA = re.compile(r"^cu(\d+)$")


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def version_matches_pin(ctx: ProbeContext) -> Outcome:
    """Claim: the installed torch is the requested pin, built from a real commit.

    Decides by comparing ``torch.__version__`` (without its local ``+cu…`` tag) with the
    ``torch==X`` pin of the environment spec, and by checking ``torch.version.git_version``
    is a 40-digit commit hash equal to the build configuration's ``COMMIT_SHA``. No pin
    in the spec (an interpreter or 'current') is not checkable: nothing to compare with.
    """
    import torch

    installed = str(torch.__version__)
    git_version = str(getattr(torch.version, "git_version", ""))
    pin = ctx.params.get("requested_torch")
    evidence: dict[str, Any] = {"installed": installed, "git_version": git_version, "pin": pin}
    if not _GIT_HASH.match(git_version):
        return refuted(f"git hash {git_version!r} is not a commit id", **evidence)
    built_from = re.search(r"COMMIT_SHA=([0-9a-f]{40})", torch.__config__.show())
    evidence["config_commit"] = built_from.group(1) if built_from else None
    if built_from and built_from.group(1) != git_version:
        return refuted("torch.version.git_version differs from the build's COMMIT_SHA", **evidence)
    if not pin:
        return not_checkable("not checked: the environment spec pins no torch version", **evidence)
    if _public(installed) != _public(str(pin)):
        return refuted(f"asked for torch {pin}, found {installed}", **evidence)
    return confirmed(f"torch {installed} at {git_version[:12]} as pinned", **evidence)


def build_variant_consistent(ctx: ProbeContext) -> Outcome:
    """Claim: the build variant (CPU, CUDA x.y, ROCm) the version tag names is the one built.

    Decides by comparing the local version tag (``+cpu``, ``+cu130``, ``+rocm…``) with
    ``torch.version.cuda`` / ``torch.version.hip``: a ``+cu130`` wheel must report CUDA 13.0,
    a ``+cpu`` wheel neither. An untagged version (a default PyPI wheel) records what it has.
    """
    import torch

    installed = str(torch.__version__)
    tag = installed.split("+", 1)[1] if "+" in installed else ""
    cuda, hip = torch.version.cuda, getattr(torch.version, "hip", None)
    evidence = {"version": installed, "tag": tag, "cuda": cuda, "hip": hip}
    cuda_tag = _LOCAL_CUDA.match(tag)
    if cuda_tag:
        digits = cuda_tag.group(1)
        expected = f"{digits[:-1]}.{digits[-1]}"
        if cuda != expected:
            return refuted(f"tag +{tag} but torch.version.cuda is {cuda}", **evidence)
    elif tag == "cpu" and (cuda or hip):
        return refuted(f"+cpu wheel reports CUDA {cuda} / HIP {hip}", **evidence)
    elif tag.startswith("rocm") and not str(hip or "").startswith(tag[4:].split(".")[0]):
        return refuted(f"tag +{tag} but torch.version.hip is {hip}", **evidence)
    variant = f"CUDA {cuda}" if cuda else f"ROCm {hip}" if hip else "CPU"
    return confirmed(f"{variant} build, consistent with tag {tag or '(none)'}", **evidence)


def cxx11_abi_flag(ctx: ProbeContext) -> Outcome:
    """Claim: the C++ ABI flag torch reports is the ABI its libraries were compiled with.

    Decides by comparing ``torch._C._GLIBCXX_USE_CXX11_ABI`` (what extensions must match)
    with the library itself: symbols built with the new ABI carry ``__cxx11`` in their
    mangled names, so ``libc10`` holds that marker exactly when the flag is 1.
    """
    import mmap
    import os

    import torch

    reported = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    libraries = [n for n in sorted(os.listdir(lib_dir)) if n.startswith("libc10.")]
    evidence: dict[str, Any] = {"reported": reported, "library": libraries[:1]}
    if not libraries:
        return not_checkable("not checked: no libc10 library next to torch", **evidence)
    with open(os.path.join(lib_dir, libraries[0]), "rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        built_new_abi = mapped.find(b"__cxx11") >= 0
        mapped.close()
    evidence["library_has_cxx11_symbols"] = built_new_abi
    if built_new_abi != reported:
        return refuted(f"flag says {int(reported)}, the library was built otherwise", **evidence)
    return confirmed(
        f"_GLIBCXX_USE_CXX11_ABI={int(reported)}, as the library was built", **evidence
    )


def math_libraries_present(ctx: ProbeContext) -> Outcome:
    """Claim: BLAS, LAPACK and oneDNN are built in and answer.

    Decides from the build configuration (``BLAS_INFO``, ``LAPACK_INFO``) and
    ``torch.backends.mkldnn.is_available()``, then by calling each: a matmul (BLAS), a
    linear solve (LAPACK) and a oneDNN convolution, each against a float64 result.
    """
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    lapack = re.search(r"LAPACK_INFO=(\w+)", config)
    onednn = torch.backends.mkldnn.is_available()
    evidence: dict[str, Any] = {
        "blas": blas.group(1) if blas else None,
        "lapack": lapack.group(1) if lapack else None,
        "onednn": onednn,
        "mkl": torch.backends.mkl.is_available(),
    }
    missing = [name for name in ("blas", "lapack", "onednn") if not evidence[name]]
    if missing:
        return refuted(f"missing from the build: {', '.join(missing)}", **evidence)
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(64, 64, generator=generator, dtype=torch.float64) + 64 * torch.eye(64)
    b = torch.randn(64, 8, generator=generator, dtype=torch.float64)
    solved = torch.linalg.solve(a, b)
    evidence["solve_residual"] = float((a @ solved - b).abs().max())
    with torch.backends.mkldnn.flags(enabled=True):
        x = torch.randn(1, 3, 16, 16, generator=generator)
        w = torch.randn(4, 3, 3, 3, generator=generator)
        conv = torch.nn.functional.conv2d(x, w)
    reference = torch.nn.functional.conv2d(x.double(), w.double())
    evidence["conv_error"] = float((conv.double() - reference).abs().max())
    if evidence["solve_residual"] > 1e-10 or evidence["conv_error"] > 1e-3:
        return refuted("a math library answered wrongly", **evidence)
    return confirmed(
        f"BLAS {evidence['blas']}, LAPACK {evidence['lapack']}, oneDNN present and correct",
        **evidence,
    )


PROBES = (
    Probe(
        id="sanity.version-pin",
        claim="The installed torch is the version that was pinned, with a real git hash.",
        scope="any torch build",
        run=version_matches_pin,
        timeout_s=60,
    ),
    Probe(
        id="sanity.build-variant",
        claim="The CPU/CUDA/ROCm variant the version tag names is the one built.",
        scope="any torch build",
        run=build_variant_consistent,
        timeout_s=60,
    ),
    Probe(
        id="sanity.cxx11-abi",
        claim="The C++ ABI flag torch reports matches its build configuration.",
        scope="any torch build",
        run=cxx11_abi_flag,
        timeout_s=60,
    ),
    Probe(
        id="sanity.math-libraries",
        claim="BLAS, LAPACK and oneDNN are built in and give correct answers.",
        scope="CPU",
        run=math_libraries_present,
        timeout_s=120,
    ),
)
