"""The worker side: runs inside a target environment, imports only the stdlib and torch.

The orchestrator starts ``<env python> -m torchcanary.worker`` and speaks the line-JSON
protocol in :mod:`torchcanary.worker.protocol` over its stdin and a private copy of stdout.
``bench/``, ``drill/`` and ``stack/`` are those sections' in-environment halves (workloads
and timing, the drill job and its shim, the pytest plugin): everything that runs inside a
target environment lives here, in ``probes/`` or in ``packs/builtin/``
(tests/test_architecture.py holds it to that).
"""
