"""Both environments of a plan, built or reused, wherever a run needs them: the runner on
this machine, a fleet node's section, a rank host across nodes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from torchcanary.envs.cache import Environment, ensure_environment, resolve_installer
from torchcanary.envs.spec import parse_env_spec
from torchcanary.plan import RunPlan
from torchcanary.progress import Progress


def prepare_environments(plan: RunPlan, progress: Progress) -> dict[str, Environment]:
    """Both environments, built or reused at once: a cold build is mostly pip waiting on
    downloads and unpacking, and the two do not need each other."""
    specs = {"baseline": parse_env_spec(plan.baseline), "candidate": parse_env_spec(plan.candidate)}
    roles = list(specs)
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
        how = "reused from cache" if env.reused else f"built in {env.build_seconds:.0f} s"
        progress.note(f"{role}: torch {env.torch_version} ({how}) at {env.path}")
    return environments
