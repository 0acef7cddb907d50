"""The startup explanation: the change of ``import torch``
split once, into the candidate build's own libraries, the libraries both load and the
rest, with the single libraries and modules as detail inside their part."""

from __future__ import annotations

from torchcanary.explain.cause import ExplainStatus
from torchcanary.explain.section import combine
from torchcanary.explain.startup import (
    decompose,
    is_cuda_library,
    library_name,
    load_order,
)
from torchcanary.section_types import Finding

_FINDING = Finding("bench", "startup/import_torch", "timing", "+20 %", facts={"kind": "startup"})


def test_libraries_are_matched_across_builds_without_the_wheels_hash() -> None:
    assert library_name("/x/torch/lib/libgomp-a34b3233.so.1") == "libgomp.so.1"
    assert is_cuda_library("/x/nvidia/cu13/lib/libcublas.so.13")
    assert not is_cuda_library("/x/torch/lib/libtorch_cpu.so")
    order = load_order(
        [
            "/x/torch/lib/libtorch_python.so",
            "/x/torch/lib/libtorch_cuda.so",
            "/x/torch/lib/libtorch_cpu.so",
            "/x/torch/lib/libc10.so",
            "/x/nvidia/cu13/lib/libcublas.so.13",
            "/x/torch/_C.cpython-311-x86_64-linux-gnu.so",
        ]
    )
    assert [p.rsplit("/", 1)[1] for p in order] == [
        "libcublas.so.13",
        "libc10.so",
        "libtorch_cpu.so",
        "libtorch_cuda.so",
        "libtorch_python.so",
    ]


_BASE_LIBS = {"/b/torch/lib/libc10.so": 1_000_000, "/b/torch/lib/libtorch_cpu.so": 9_000_000}
_CAND_LIBS = {
    "/c/torch/lib/libc10.so": 1_000_000,
    "/c/torch/lib/libtorch_cpu.so": 9_000_000,
    "/c/nvidia/cu13/lib/libcublas.so.13": 90_000_000,
}


def _side(plain: float, libraries: dict[str, float], rest: float) -> dict:
    """One side of a round in CPU seconds (what is split); its wall seconds three times as
    long and noisier, as on a shared machine, and never split."""
    wall = {path: 3 * s for path, s in libraries.items()}
    return {
        "plain_cpu": plain,
        "plain": 3 * plain,
        "libraries_cpu_s": libraries,
        "import_cpu_s": rest,
        "libraries_s": wall,
        "import_s": 3 * rest,
    }


def _rounds(extra_s: list[float], python_s: list[float] | None = None) -> dict[str, list[dict]]:
    """Rounds where the candidate loads cuBLAS (``extra_s[i]`` CPU seconds in round ``i``)
    and its Python part takes ``python_s[i]`` (20 ms) more; the plain import moves by both
    and 5 ms of preloading the split does not see."""
    rounds: dict[str, list[dict]] = {"baseline": [], "candidate": []}
    for index, extra in enumerate(extra_s):
        python = python_s[index] if python_s else 0.02
        drift = 0.01 * index  # the machine, the same for both sides of a round
        base = {"/b/torch/lib/libc10.so": 0.01, "/b/torch/lib/libtorch_cpu.so": 0.2 + drift}
        cand = {k.replace("/b/", "/c/"): v for k, v in base.items()}
        cand["/c/nvidia/cu13/lib/libcublas.so.13"] = extra
        rounds["baseline"].append(_side(1.0 + drift, base, 0.79))
        plain = 1.0 + drift + extra + python + 0.005
        rounds["candidate"].append(_side(plain, cand, 0.79 + python))
    return rounds


def _profiles() -> dict[str, dict]:
    return {
        "baseline": {"libraries": _BASE_LIBS, "modules_s": {"torch": 0.5, "torch._C": 0.2}},
        "candidate": {"libraries": _CAND_LIBS, "modules_s": {"torch": 0.7, "torch._C": 0.3}},
    }


def test_the_import_change_is_split_once_into_parts_that_add_up() -> None:
    part = decompose(_profiles(), _rounds([0.30, 0.32, 0.28, 0.31, 0.29]), "cmd")
    explanation = combine(_FINDING, [part], [], 0.0)
    parts = {cause.kind: cause for cause in explanation.causes}
    assert set(parts) == {"build", "shared-libraries", "python"}
    assert explanation.unexplained is not None
    total = sum(cause.share or 0.0 for cause in explanation.causes) + explanation.unexplained
    assert abs(total - 1.0) < 1e-9  # the parts and the unexplained add up to the change
    assert abs(parts["build"].share - 0.3 / 0.325) < 1e-9  # type: ignore[operator]
    assert explanation.causes[0].kind == "build"  # told apart from the rest: it leads alone
    assert "it leads, ahead of the rest of import torch" in explanation.causes[0].evidence
    # overlapping views are detail inside their part, never shares beside it
    assert parts["build"].detail["within"][0].startswith("library libcublas.so.13: loading it")
    assert parts["python"].detail["within"][0].startswith("module torch: 500 ms -> 700 ms")


def test_rounds_that_do_not_reproduce_the_change_give_no_share_and_say_what_they_measured():
    rounds = _rounds([0.3, -0.3, 0.3, -0.3, 0.0])
    explanation = combine(_FINDING, [decompose(_profiles(), rounds, "cmd")], [], 0.0)
    assert explanation.causes == () and explanation.unexplained is None
    assert explanation.verdict is ExplainStatus.NOT_CHECKED
    [reason] = explanation.not_checked
    assert reason.startswith("startup: these rounds did not reproduce the import's change: ")
    assert "CPU +25 ms [" in reason and "wall +75 ms [" in reason and "over 5 rounds" in reason
    # what each part moved is said, in the fixed order
    assert reason.endswith("the candidate build's own libraries +0 ms [-372, +372], the rest "
                           "of import torch (Python modules, initialisation) +20 ms [+20, +20], "
                           "the libraries both builds load +0 ms [+0, +0]; no share is shown")
