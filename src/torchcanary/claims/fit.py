"""Which claims a node's hardware can answer: a node is never asked about hardware it lacks.

A probe names the devices its claim is about (``Needs.devices``, any of them). A profile
offers ``cpu`` always, ``cuda`` when it has GPUs (NVIDIA, or AMD through ROCm's HIP, which
PyTorch also calls ``cuda``) and ``mps`` on Apple silicon. A probe that needs a device the
profile does not offer is left out of that node's plan, with the reason, so its cell in
the claim x profile matrix says why it is empty instead of holding a verdict. The fleet
driver asks through the section contract (``fit_plan``).
"""

from __future__ import annotations

from dataclasses import replace

from torchcanary.claims import settings as claims_settings
from torchcanary.claims.catalog import requested_torch, select_claims
from torchcanary.claims.view import SECTION
from torchcanary.hardware_profile import HardwareProfile
from torchcanary.plan import RunPlan


def profile_devices(profile: HardwareProfile) -> set[str]:
    """The torch device types this hardware offers."""
    devices = {"cpu"}
    if profile.gpu_count > 0:
        devices.add("cuda")
    if profile.arch == "arm64" and "mac" in profile.os.casefold():
        devices.add("mps")
    return devices


def fit_plan(plan: RunPlan, profile: HardwareProfile) -> tuple[RunPlan, dict[str, str]]:
    """``plan`` narrowed to the claims this profile can answer, and each left out with why.

    The claims are chosen as the node will choose them (the candidate's requested release);
    only the probes a device rules out are dropped, so a profile that fits all gets
    ``plan`` unchanged.
    """
    if SECTION not in plan.sections:
        return plan, {}
    settings = claims_settings.of(plan)
    selected = select_claims(
        settings.probes,
        settings.probe_modules,
        settings.release,
        settings.regression,
        requested_torch(plan.candidate),
    ).probes
    offered = profile_devices(profile)
    not_asked = {
        pid: f"needs {' or '.join(planned.probe.needs.devices)}; {profile.key} has none"
        for pid, planned in selected.items()
        if planned.probe.needs.devices and not offered & set(planned.probe.needs.devices)
    }
    if not not_asked:
        return plan, {}
    asked = tuple(sorted(set(selected) - set(not_asked)))
    if not asked:  # nothing left to ask: the claims unit is not sent at all
        return replace(plan, sections=tuple(s for s in plan.sections if s != SECTION)), not_asked
    narrowed = replace(settings, probes=asked).to_json()
    return replace(plan, settings={**plan.settings, SECTION: narrowed}), not_asked
