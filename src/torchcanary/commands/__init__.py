"""The command line's commands, one module per group: each adds its own parsers and flags
(``add_commands``, as a section adds its own), turns ``args`` into keyword arguments at its
own boundary, and hands back its handlers (``command_line.py``: the shapes they share);
``cli.py`` only builds the top parser and routes.
"""

from __future__ import annotations

# The top parser's and ``run``'s closing text.
EPILOG = """\
examples:
  torchcanary run --baseline torch==2.13.0 --candidate torch==2.14.1
  torchcanary run --candidate "torch==2.14.1 numpy" --only claims --probes 'c10d.*'
  torchcanary run --resume                   # carry on after an interruption
  torchcanary probes                          # every claim probe and what it needs
  torchcanary packs                           # the claims packs installed, one per release
  torchcanary claims checklist NOTES.md --release 2.15   # draft a pack from the notes
  torchcanary runs && torchcanary report RUN_ID
  torchcanary publish site/                   # a static site of every stored run
  torchcanary verify canary-results/latest     # results.json still matches its digest?
  torchcanary repro latest                    # a verified reproducer per finding
  torchcanary ci init github --runner-label h100  # a workflow for a self-hosted GPU runner

environments (--baseline/--candidate): pip requirements ('torch==2.13.0 numpy'), an
interpreter ('python:/opt/venv/bin/python') or 'current'. Requirement sets are built once
into a cache (TORCHCANARY_CACHE, default the user cache dir) and reused.
configuration: [tool.torchcanary] in pyproject.toml or canary.toml; flags win.
exit codes: 0 go, 1 no-go, 2 usage/configuration error, 3 internal error.
"""
