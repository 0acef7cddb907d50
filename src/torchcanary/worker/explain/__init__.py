"""The explain section's in-environment half: what only a process under the target torch
can measure (import time by module, the shared libraries loaded, runtime settings)."""
