"""Pillar 3: the user's own test suite and scripts under both versions, diffed."""
