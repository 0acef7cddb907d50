"""Pillar 4: fault drills on a representative distributed training job."""
