"""Both environments of a plan, built or reused, wherever a run needs them (the runner on
this machine, a fleet node's section, a rank host across nodes), each with the torch
family members paired with its torch (``companions.py``)."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torchcanary.envs import companions
from torchcanary.envs.cache import Environment, ensure_environment, resolve_installer
from torchcanary.envs.companions import Companion
from torchcanary.envs.spec import EnvSpec, parse_env_spec
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress


def prepare_environments(plan: RunPlan, progress: Progress) -> dict[str, Environment]:
    """Both environments, built or reused at once: a cold build is mostly pip waiting on
    downloads and unpacking, and the two do not need each other."""
    specs = {"baseline": parse_env_spec(plan.baseline), "candidate": parse_env_spec(plan.candidate)}
    roles = list(specs)
    sets = {role: requirement_set_companions(role, specs[role], plan.companions) for role in specs}
    specs = {role: sets[role][0] for role in specs}
    installer = resolve_installer(plan.installer)  # here, not in the threads: see uv_binary
    environments = {}
    with progress.task("environments", total=len(roles)) as task:

        def ensure(role: str) -> Environment:
            return ensure_environment(
                role,
                specs[role],
                installer=installer,
                progress=lambda message: task.status(f"{role}: {message}"),
            )

        with ThreadPoolExecutor(max_workers=len(roles)) as pool:
            pending = {role: pool.submit(ensure, role) for role in roles}
            for role in roles:
                environments[role] = pending[role].result()
                task.advance(f"{role}: {specs[role].text}")
    for role, env in environments.items():
        companions = sets[role][1] + command_companions(role, env.torch_version, plan)
        environments[role] = env = dataclasses.replace(env, companions=companions)
        how = "reused from cache" if env.reused else f"built in {env.build_seconds:.0f} s"
        progress.note(f"{role}: torch {env.torch_version} ({how}) at {env.path}")
        for companion in companions:
            paired = f" (paired; {companion.given} was given)" if companion.paired else ""
            progress.note(f"{role}: {companion.name} {companion.build}{paired}")
    return environments


def requirement_set_companions(
    role: str, spec: EnvSpec, mode: str
) -> tuple[EnvSpec, tuple[Companion, ...]]:
    """The family members a requirement set names, paired with its exact torch pin before
    it is built; with ``auto`` the spec carries the pairs (a set without an exact pin is
    left to the installer)."""
    torch_version = companions.torch_pin(spec.requirements)
    if spec.kind != "requirements" or torch_version is None:
        return spec, ()
    found = companions.pair(
        role,
        torch_version,
        spec.requirements,
        cwd=Path.cwd(),
        mode=mode,
        source=f"--{role} {spec.text!r}",
    )
    paired = tuple(companions.apply(spec.requirements, found))
    return dataclasses.replace(spec, requirements=paired), found


def command_companions(role: str, torch_version: str, plan: RunPlan) -> tuple[Companion, ...]:
    """The family members the user's command installs (``--with`` and the projects it
    names, in every section that takes one), paired with this side's torch: refused here,
    before any section runs, where a pin cannot match."""
    found: dict[tuple[str, str], Companion] = {}
    for section in plan.sections:
        settings = plan.section_settings(section)
        # the user's command's, the workloads' (``with``) and the drill job's (``job_with``)
        for key, cwd_key in (("with", "cwd"), ("job_with", "job_cwd")):
            for companion in companions.pair(
                role,
                torch_version,
                [str(r) for r in settings.get(key, ())],
                cwd=Path(str(settings.get(cwd_key) or ".")),
                mode=plan.companions,
                source="--with",
            ):
                found.setdefault((companion.given, companion.source), companion)
    return tuple(found.values())
