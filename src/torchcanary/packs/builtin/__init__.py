"""The packs that ship with torchcanary: binary sanity, PyTorch 2.14, PyTorch 2.13."""
