"""The orchestrator side of environments: specs, the cached venvs, and worker processes."""
