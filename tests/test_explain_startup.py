"""The startup explanation: the change of ``import torch``
split once, into the candidate build's own libraries, the libraries both load and the
rest, with the single libraries and modules as detail inside their part."""

from __future__ import annotations

import random
import time

from torchcanary.explain.cause import ExplainStatus, Explanation
from torchcanary.explain.job import ExplainJob
from torchcanary.explain.section import combine
from torchcanary.explain.settings import ExplainSettings
from torchcanary.explain.startup import (
    decompose,
    explain,
    is_cuda_library,
    library_name,
    load_order,
)
from torchcanary.report.view import load_run_view
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


_PLAIN_NOISE = (0.01, -0.01, 0.005, -0.005, 0.0)


def _rounds(
    extra_s: list[float], python_s: list[float] | None = None, preloading_s: float = 0.0
) -> dict[str, list[dict]]:
    """Rounds where the candidate loads cuBLAS (``extra_s[i]`` CPU seconds in round ``i``)
    and its Python part takes ``python_s[i]`` (20 ms) more; the plain import moves by both,
    with 10 ms of its own noise, less ``preloading_s`` that preloading adds to the split."""
    rounds: dict[str, list[dict]] = {"baseline": [], "candidate": []}
    for index, extra in enumerate(extra_s):
        python = python_s[index] if python_s else 0.02
        drift = 0.01 * index  # the machine, the same for both sides of a round
        base = {"/b/torch/lib/libc10.so": 0.01, "/b/torch/lib/libtorch_cpu.so": 0.2 + drift}
        cand = {k.replace("/b/", "/c/"): v for k, v in base.items()}
        cand["/c/nvidia/cu13/lib/libcublas.so.13"] = extra
        rounds["baseline"].append(_side(1.0 + drift, base, 0.79))
        plain = 1.0 + drift + extra + python + _PLAIN_NOISE[index % 5] - preloading_s
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
    # the parts are the split children's whole import: they add up to its change and
    # leave nothing unexplained
    assert explanation.unexplained == 0.0
    assert explanation.verdict is ExplainStatus.EXPLAINED
    assert abs(sum(cause.share or 0.0 for cause in explanation.causes) - 1.0) < 1e-9
    assert abs(parts["build"].share - 0.3 / 0.32) < 1e-9  # type: ignore[operator]
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
    assert "the split import CPU +20 ms [-" in reason and "over 5 rounds" in reason
    assert "the plain import CPU +20 ms [" in reason and "and wall +60 ms [" in reason
    # what each part moved is said, in the fixed order
    assert reason.endswith(
        "the candidate build's own libraries +0 ms [-372, +372], the rest "
        "of import torch (Python modules, initialisation) +20 ms [+20, +20], "
        "the libraries both builds load +0 ms [+0, +0]; no share is shown"
    )


def test_a_faster_split_does_not_reproduce_a_slower_finding() -> None:
    """The split children's import got 320 ms faster, told apart from 0, but the finding
    says the candidate's import got slower: the rounds reproduced something else."""
    rounds = _rounds([-0.3, -0.32, -0.28, -0.31, -0.29], [-0.02] * 5)
    explanation = combine(_FINDING, [decompose(_profiles(), rounds, "cmd")], [], 0.0)
    assert explanation.causes == () and explanation.verdict is ExplainStatus.NOT_CHECKED
    [reason] = explanation.not_checked
    assert reason.startswith("startup: these rounds did not reproduce the import's change: ")
    faster = combine(_FINDING, [decompose(_profiles(), rounds, "cmd", slower=False)], [], 0.0)
    assert faster.causes[0].kind == "build" and faster.unexplained == 0.0


def test_a_split_that_preloading_changed_gives_no_share() -> None:
    """Preloading added 100 ms to the split children that the plain import does not spend
    (a library opened twice, say): the split is not the plain import's, so no share."""
    rounds = _rounds([0.30, 0.32, 0.28, 0.31, 0.29], preloading_s=0.1)
    explanation = combine(_FINDING, [decompose(_profiles(), rounds, "cmd")], [], 0.0)
    assert explanation.causes == () and explanation.verdict is ExplainStatus.NOT_CHECKED
    [reason] = explanation.not_checked
    assert reason.startswith(
        "startup: preloading the libraries changed the import: the plain import minus the "
        "split one -100 ms ["
    )
    assert reason.endswith("; no share is shown")


def test_a_part_not_told_apart_whose_share_may_be_none_is_said_so() -> None:
    """The rest of the import moved by 50 ms, give or take 60, from round to round: not
    told apart from the build's libraries (130 ms every round), yet its share's interval
    holds 0, so the libraries lead alone, and the line says the rest is not told apart
    from them, not that they lead "ahead of" it."""
    build = [0.13, 0.131, 0.129, 0.13, 0.13]
    python = [0.0, 0.1, 0.05, 0.12, -0.02]
    rounds = _rounds(build, python)
    [first, *_] = combine(_FINDING, [decompose(_profiles(), rounds, "cmd")], [], 0.0).causes
    assert first.kind == "build"
    assert "ahead of" not in first.evidence
    assert (
        "it leads: the rest of import torch (Python modules, initialisation) is not told "
        "apart from it (the candidate build's own libraries minus it "
    ) in first.evidence
    assert first.evidence.endswith(
        "but its own share's interval holds 0: it may account for none of the change"
    )


def _near_tie(seed: int) -> Explanation:
    """Five rounds of a change held half by the build's own libraries (130 ms, loading
    varies by 7 ms) and half by the rest of the import (130 ms, varies by 100 ms): the
    spread of each measured on this machine in CPU time."""
    rng = random.Random(seed)
    build = [rng.gauss(0.13, 0.007) for _ in range(5)]
    python = [rng.gauss(0.13, 0.1) for _ in range(5)]
    return combine(_FINDING, [decompose(_profiles(), _rounds(build, python), "cmd")], [], 0.0)


def test_a_near_tie_explained_twice_names_the_same_leading_parts() -> None:
    """Two runs whose point estimates put the parts in opposite orders (the draws are chosen
    so): each says the two lead together, in the same fixed order, with the same verdict and
    overlapping intervals, instead of following the noise."""
    first, second = _near_tie(0), _near_tie(3)
    for explanation in (first, second):
        assert [c.kind for c in explanation.causes[:2]] == ["build", "python"]
        assert "it leads together with the rest of import torch" in explanation.causes[0].evidence
        assert explanation.verdict is ExplainStatus.EXPLAINED
    a, b = ({c.kind: c for c in e.causes} for e in (first, second))
    assert (a["build"].share > a["python"].share) != (b["build"].share > b["python"].share)
    for kind in ("build", "python"):
        assert a[kind].share_low <= b[kind].share_high and b[kind].share_low <= a[kind].share_high


def test_the_real_import_change_leads_with_the_builds_own_libraries(make_context) -> None:
    """On the real environments (the main job's startup finding): loading the CUDA build's
    own libraries costs the candidate about 130 ms of CPU in every round, a cause large
    enough to show under load, and the part named first, alone or with the rest of the
    import, whether or not three rounds reproduce the whole change."""
    ctx = make_context(sections=("bench",))
    view = load_run_view(ctx.store, ctx.run_id)
    job = ExplainJob(ctx, view, ExplainSettings(repeats=3), time.monotonic() + 600)
    part = explain(job, _FINDING)
    startup = part.extra["startup"]
    print(startup["delta_s"], startup["wall_delta_s"], startup["leading"], part.not_checked)
    assert startup["order"][0] == "build"
