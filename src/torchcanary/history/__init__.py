"""Questions across runs, read from one store: a result's history, and two runs compared.

``query`` turns the store's rows into history entries, ``compare`` diffs two runs,
``render`` draws them, ``commands`` is their command line (``history``, ``compare`` and
``store migrate|copy``).
"""
