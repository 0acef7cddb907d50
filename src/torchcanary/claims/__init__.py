"""Pillar 1: every claim of a release checked by a probe, in both environments."""
