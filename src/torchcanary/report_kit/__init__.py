"""The report kit: drawing and text helpers that sections and the report writers share
(SVG charts, terminal listings, Markdown-safe text, a fleet run's ledger rows). It reads
no registry, so a section uses it without sitting above the report writers."""
