"""Claims of PyTorch 2.13, as the 2.13.0 wheel's own documentation states them.

No 2.13 release-notes text is on this machine, so this pack quotes what torch 2.13.0
documents as changed in 2.13 (the ``.. deprecated:: 2.13`` markers of its docstrings).
Run against a 2.14 candidate with ``--regression 2.13``: do 2.13's claims still hold?
"""
