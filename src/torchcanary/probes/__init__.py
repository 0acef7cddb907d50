"""Built-in probes, one module per claim of the release. Each module exposes PROBES."""
