"""The stack's in-environment half: the pytest plugin loaded into the user's own run."""
