"""The claims of PyTorch 2.14. Its probes live in ``torchcanary.probes`` (named in pack.json)."""
