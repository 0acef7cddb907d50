"""The explain section's in-environment half: profiles and compile-phase timings taken in
runs of their own, never mixed into the A/B samples (stdlib and torch only)."""
