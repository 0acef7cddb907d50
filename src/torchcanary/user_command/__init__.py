"""The user's own command, run under the same conditions in each environment.

Shared by the sections that run it (the stack compares its outcomes, the calls record its
torch calls; the bench and the drill install the user's project the same way). The flow,
one module per step: ``settings`` (the command's table and its validation) and ``flags``
(the same as command-line options) -> ``overlay`` (a child venv per role over the cached
torch environment, with the user's project installed) -> ``command`` (the command line and
the same conditions for both) -> ``session`` (one command in its own session: timeout,
bounded output, leftovers killed) -> the pytest plugin (in ``worker/stack/``, loaded by
the user's pytest) and ``events`` (per-test outcomes and warnings) -> ``records`` (the plain
data of a run) -> ``execute`` (a role's main run and re-runs).
"""
