"""The packs that ship with torchcanary: binary sanity, PyTorch 2.14."""
