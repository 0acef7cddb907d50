"""The startup explanation on the two real environments: ``import torch`` split into each
build's shared libraries and the rest, the modules and libraries named, and the part of
the delta the candidate build's own libraries (a CUDA build's) account for."""

from __future__ import annotations

import time

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


def test_the_import_delta_is_split_into_libraries_and_modules_with_the_builds_share(
    make_context, candidate_env
) -> None:
    ctx = make_context(sections=("bench",))
    view = load_run_view(ctx.store, ctx.run_id)
    job = ExplainJob(ctx, view, ExplainSettings(repeats=3), time.monotonic() + 600)
    finding = Finding("bench", "startup/import_torch", "timing", "+20 %", facts={"kind": "startup"})
    explanation = combine(finding, [explain(job, finding)], [], 0.0)
    kinds = {cause.kind for cause in explanation.causes}
    assert {"build", "shared-libraries", "python", "module"} <= kinds
    build = next(c for c in explanation.causes if c.kind == "build")
    assert build.share_low is not None and build.share_high is not None
    assert build.share_low <= build.share <= build.share_high  # type: ignore[operator]
    assert "libraries" in build.evidence and "-X importtime" in build.reproduce
    facts = explanation.extra["startup"]
    if "+cu" in candidate_env.torch_version:  # a CUDA candidate loads CUDA libraries of its own
        assert facts["cuda_libraries"]
    # The unexplained part is measured where the rounds reproduced the change, else said so.
    assert explanation.unexplained is not None or any(
        "did not reproduce" in reason for reason in explanation.not_checked
    )
    print("\n".join(c.describe() + " " + c.evidence for c in explanation.causes))
    print("unexplained", explanation.unexplained, facts)
