"""Pillar 2: performance A/B between baseline and candidate, interleaved and calibrated.

This package is the orchestrator's half (scheduling, statistics, verdicts, reports) and never
imports torch; what runs inside an environment (workloads, timing) is ``worker/bench/``."""
