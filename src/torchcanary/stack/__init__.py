"""Pillar 3: the user's own test suite and scripts under both versions, diffed.

Running the command in each environment is the shared layer's (``user_command/``: its
settings and flags, the overlay, the run and its re-runs); here it is compared, one module
per step: ``diff`` and ``numerics_diff`` (the top-level comparator of recorded tensors)
(pure comparisons) -> ``compare`` (diff, re-runs, numerics) -> ``section`` (the story, the
store and the policy) -> ``report``.
"""
