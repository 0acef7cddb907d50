"""Pillar 2: performance A/B between baseline and candidate, interleaved and calibrated.

Worker-side modules (workloads, timing) import only the stdlib and torch; orchestrator-side
modules (scheduling, statistics) never import torch."""
