"""The explain section's in-environment half: what only a process under the target torch
can measure (import time by module, the shared libraries loaded, runtime settings, op
profiles, compile phases), in runs of their own, never mixed into the A/B samples."""
