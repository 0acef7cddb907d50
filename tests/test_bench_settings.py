"""The bench config table: defaults, validation messages, and the benchmarks it expands to."""

from __future__ import annotations

import pytest

from torchcanary.bench import section
from torchcanary.bench.settings import BenchSettings, parse_settings
from torchcanary.bench.suite import expand
from torchcanary.errors import ConfigError


def test_defaults_are_filled_and_survive_a_json_round_trip() -> None:
    settings = parse_settings({})
    assert settings.groups == 12 and settings.fdr == 0.01 and not settings.aa
    again = BenchSettings.from_json(
        section.parse_settings({"rounds": 8, "linear": {"batch": [1, 8], "dtypes": ["bf16"]}})
    )
    assert again.rounds == 8
    assert again.family("linear")["dtypes"] == ["bfloat16"]
    assert again.family("linear")["k"] == [4096]


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"round": 3}, "round"),
        ({"rounds": 0}, "rounds"),
        ({"rounds": "many"}, "rounds"),
        ({"aa": "yes"}, "aa"),
        ({"linear": {"dtypes": ["flaot16"]}}, "flaot16"),
        ({"gemm": {"shapes": [[512, 512]]}}, "gemm.shapes"),
        ({"gemm": {"size": [1]}}, "gemm.size"),
        ({"families": ["linear", "conv"]}, "conv"),
        ({"benchmarks": [{"kind": "fft"}]}, "benchmarks"),
        ({"benchmarks": [{"kind": "gemm", "m": 8}]}, "needs 'k'"),
        ({"sdpa": {"shapes": [{"batch": 1}]}}, "sdpa.shapes"),
    ],
)
def test_a_bad_key_or_value_is_one_line_naming_it_and_the_fix(table: dict, named: str) -> None:
    with pytest.raises(ConfigError) as raised:
        section.parse_settings(table)
    message = str(raised.value)
    assert named in message and "\n" not in message
    assert ";" in message  # problem; fix


def test_default_suite_covers_decode_linear_gemm_attention_startup_and_collectives() -> None:
    ids = [spec["id"] for spec in expand(parse_settings({}), "cpu")]
    assert "linear/[1,1,4096]x[4096,4096]/bf16/cpu" in ids
    assert "linear/[32,4096]x[4096,4096]/fp32/cpu" in ids
    assert any(i.startswith("gemm/") for i in ids)
    assert any(i.startswith("sdpa/") and "q1kv1024" in i for i in ids)
    assert "startup/import_torch" in ids
    assert "collective/all_reduce/4MiB/gloox2" in ids
    assert len(ids) == len(set(ids))


def test_collectives_use_nccl_on_cuda_and_extra_benchmarks_get_ids() -> None:
    settings = parse_settings(
        {
            "families": ["collectives"],
            "benchmarks": [{"kind": "gemm", "m": 8, "k": 8, "n": 8, "dtype": "fp16"}],
        }
    )
    specs = expand(settings, "cuda")
    assert all(s["backend"] == "nccl" for s in specs if s["kind"] == "collective")
    assert specs[-1]["id"] == "gemm/8x8x8/fp16/cuda"
