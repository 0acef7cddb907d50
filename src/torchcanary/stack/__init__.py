"""Pillar 3: the user's own test suite and scripts under both versions, diffed.

The flow, one module per step: ``settings`` (the config table) -> ``overlay`` (a child venv
per role over the cached torch environment, with the user's project installed) ->
``command`` (the command line and the same conditions for both) -> ``runner`` (one command
in its own session: timeout, bounded output, leftovers killed) -> ``pytest_plugin`` (in
``worker/stack/``, loaded by the user's pytest) and ``events`` (per-test outcomes and
warnings) -> ``execute`` (a role's main run and re-runs) ->
``diff`` and ``numerics_diff`` (pure comparisons) -> ``compare`` (diff, re-runs, numerics) ->
``section`` (the story, the store and the policy) -> ``report``.
"""
