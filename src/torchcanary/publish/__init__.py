"""A static site built from a store (``torchcanary publish``): an overview of candidates x
hardware, every run's report, each item's history, and the open regressions.

``inventory`` reads what each run is (its cell: candidate, build variant, hardware) and
what it holds; ``regressions`` sets each no-go cell against its last go with ``compare``'s
code; ``pages`` writes the HTML; ``site`` decides what to render again, from a manifest
of each page's inputs.
"""
