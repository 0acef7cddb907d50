"""The startup explanation on the two real environments: the change of ``import torch``
split once, into the candidate build's own libraries, the libraries both load and the
rest, with the single libraries and modules as detail inside their part."""

from __future__ import annotations

import time

from torchcanary.explain.cause import Explanation
from torchcanary.explain.job import ExplainJob
from torchcanary.explain.section import combine
from torchcanary.explain.settings import ExplainSettings
from torchcanary.explain.startup import explain, is_cuda_library, library_name, load_order
from torchcanary.report.view import load_run_view
from torchcanary.section_types import Finding


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


def _explained(make_context) -> Explanation:
    ctx = make_context(sections=("bench",))
    view = load_run_view(ctx.store, ctx.run_id)
    job = ExplainJob(ctx, view, ExplainSettings(repeats=5), time.monotonic() + 600)
    finding = Finding("bench", "startup/import_torch", "timing", "+20 %", facts={"kind": "startup"})
    return combine(finding, [explain(job, finding)], [], 0.0)


def test_the_import_change_is_split_once_into_parts_that_add_up_the_same_way_twice(
    make_context, candidate_env
) -> None:
    first, second = _explained(make_context), _explained(make_context)
    for explanation in (first, second):
        # the change is reproduced (a CUDA build loads libraries the CPU build does not)
        assert explanation.unexplained is not None, explanation.not_checked
        parts = {cause.kind: cause for cause in explanation.causes}
        assert (
            {"build", "shared-libraries", "python"}
            <= set(parts)
            <= {
                "build",
                "shared-libraries",
                "python",
                "gone",
            }
        )
        total = sum(cause.share or 0.0 for cause in explanation.causes)
        assert abs(total + explanation.unexplained - 1.0) < 1e-9  # the parts add up
        for cause in explanation.causes:
            assert cause.share_low is not None and cause.share_high is not None
            assert cause.share_low <= cause.share <= cause.share_high  # type: ignore[operator]
        # overlapping views are detail inside their part, never shares beside it
        assert all(line.startswith("module ") for line in parts["python"].detail["within"])
        build = parts["build"]
        assert "libraries" in build.evidence and "-X importtime" in build.reproduce
        assert "+cu" in candidate_env.torch_version  # a CUDA build loads libraries of its own
        assert explanation.extra["startup"]["cuda_libraries"]
        assert build.detail["within"][0].startswith("library ")
        print(explanation.verdict, [c.describe() for c in explanation.causes])
    # the same finding explained twice: the same leading part, with overlapping intervals
    lead = [max(e.causes, key=lambda c: c.share or 0.0) for e in (first, second)]
    assert lead[0].kind == lead[1].kind
    assert lead[0].share_low <= lead[1].share_high  # type: ignore[operator]
    assert lead[1].share_low <= lead[0].share_high  # type: ignore[operator]
