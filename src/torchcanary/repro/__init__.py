"""``torchcanary repro``: each finding of a stored run as a folder a user can file upstream:
a standalone ``repro.py``, the two versions' pins, what each printed in the run, a draft
issue, and whether the script, run again in both environments, still shows the change.

Findings arrive through the section contract (``Section.reproducible``), never from a
section's code: ``writers.py`` turns each kind into a :class:`~.reproducer.Reproducer`,
``folder.py`` writes it out, ``verify.py`` runs it in both cached environments,
``reduce.py`` shrinks its inputs, ``command.py`` is the command line.
"""
