"""The writer for a changed call (kind ``call``): the recorded call with its recorded
arguments, under the modes it ran under, printing what it returns or raises."""

from __future__ import annotations

from typing import Any

from torchcanary.repro.literals import Arguments
from torchcanary.repro.reproducer import Reproducer
from torchcanary.section_types import Finding

_DEFAULT_DTYPE = "torch.float32"


def call_reproducer(finding: Finding) -> Reproducer:
    """The script for one changed call; ``NotWritable`` when an argument cannot be
    rebuilt."""
    call = finding.facts["call"]
    observed = {role: str(text) for role, text in finding.facts.get("observed", {}).items()}
    warns = finding.facts.get("verdict") == "new-warning"
    return Reproducer(
        finding=f"{finding.section}:{finding.item}",
        title=f"{call['callable']} {_change_words(observed)}",
        script=call_script(call, warns),
        observed=observed,
        expects={
            "baseline": _first_line(observed.get("baseline", "")),
            "candidate": "warns" if warns else _first_line(observed.get("candidate", "")),
        },
        facts=dict(finding.facts),
    )


def call_script(call: dict[str, Any], warns: bool = False) -> str:
    """``repro.py`` for one recorded call: its outcome on the first line printed."""
    arguments = Arguments()
    passed = [arguments.value(arg) for arg in call["args"]]
    passed += [f"{name}={arguments.value(v)}" for name, v in call["kwargs"].items()]
    context = call.get("context") or {}
    imports = ["import base64"] if arguments.uses_base64 else []
    head = [*imports, "import torch"]
    if warns:
        head += [
            "import warnings",
            "",
            'warnings.simplefilter("always")',
            "warnings.showwarning = lambda message, category, *_: "
            'print(f"warns {category.__name__}: {message}")',
        ]
    setup = _modes(context)
    if call.get("seed") is not None:
        setup.append(f"torch.manual_seed({call['seed']})")
    call_line = f"result = {call['callable']}({', '.join(passed)})"
    with_line = _with(context)  # the call alone runs under the recorded grad and autocast
    tried = [f"    {with_line}", f"        {call_line}"] if with_line else [f"    {call_line}"]
    body = [
        "try:",
        *tried,
        '    print("returns", result)',
        "except Exception as exc:",
        '    print(f"raises {type(exc).__name__}:", *str(exc).splitlines()[:1])',
    ]
    return "\n".join([*head, "", *setup, *arguments.definitions, *body]) + "\n"


def _modes(context: dict[str, Any]) -> list[str]:
    """Lines that set the process-wide modes the call was recorded under, where they are
    not torch's defaults."""
    lines = []
    if context.get("default_dtype", _DEFAULT_DTYPE) != _DEFAULT_DTYPE:
        lines.append(f"torch.set_default_dtype({context['default_dtype']})")
    deterministic = context.get("deterministic", False)
    if deterministic:
        warn = ", warn_only=True" if deterministic == "warn" else ""
        lines.append(f"torch.use_deterministic_algorithms(True{warn})")
    return lines


def _with(context: dict[str, Any]) -> str:
    """The ``with`` line for the recorded grad, inference and autocast modes (empty when
    they are the defaults)."""
    managers = []
    if context.get("inference"):
        managers.append("torch.inference_mode()")
    elif context.get("grad") is False:
        managers.append("torch.no_grad()")
    for device, dtype in (context.get("autocast") or {}).items():
        managers.append(f"torch.autocast({device!r}, dtype={dtype})")
    return f"with {', '.join(managers)}:" if managers else ""


def _first_line(described: str) -> str:
    """What a replay's description (``calls/compare.py``: "returns", "raises T: ...", "the
    callable does not exist") makes the script print first."""
    if described.startswith("raises "):
        kind = described.removeprefix("raises ").split(":", 1)[0]
        return f"raises {kind.rsplit('.', 1)[-1]}:"
    if described == "the callable does not exist":
        return "raises"  # looking it up raises
    return described.split(" ", 1)[0]


def _change_words(observed: dict[str, str]) -> str:
    baseline = observed.get("baseline", "?")
    candidate = observed.get("candidate", "?")
    return f"{baseline} in the baseline, {candidate} in the candidate"
