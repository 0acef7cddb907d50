"""The drill's in-environment half: the built-in training job, the shim that starts a user's
job, the store host and the calls a job makes (stdlib and torch only)."""
