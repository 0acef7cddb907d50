"""The worker side: runs inside a target environment, imports only the stdlib and torch.

The orchestrator starts ``<env python> -m torchcanary.worker`` and speaks the line-JSON
protocol in :mod:`torchcanary.worker.protocol` over its stdin and a private copy of stdout.
"""
