"""The two torch environments the tests run against (set CANARY_TEST_* to change them).

A module of its own so that test files can import the specs: ``conftest`` is not importable
by name when the whole suite runs (``tests/fixtures/conftest.py`` answers to it too).
"""

from __future__ import annotations

import os

BASELINE_SPEC = os.environ.get("CANARY_TEST_BASELINE", "torch==2.13.0 numpy")
CANDIDATE_SPEC = os.environ.get("CANARY_TEST_CANDIDATE", "torch==2.14.1 numpy")
# The baseline's torch and nothing else, as the README's own command builds it (no numpy).
BARE_BASELINE_SPEC = os.environ.get("CANARY_TEST_BARE_BASELINE", "torch==2.13.0")
