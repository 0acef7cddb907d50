"""torchcanary: qualify a PyTorch release on your own hardware before you roll it out."""

__version__ = "0.1.0"
