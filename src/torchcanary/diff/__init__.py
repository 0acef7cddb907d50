"""Section ``diff``: the two builds' surfaces and defaults, diffed, checked against the
release's text and mapped onto the user's code.

The flow, one module per step: ``torchcanary.worker.surface`` (inside each environment:
config defaults, public API and signatures, env vars read, bundled library versions) ->
``changes`` (pure comparison, one ``SurfaceChange`` per name) -> ``notes`` (announced or not) ->
``codescan`` (the user's sources, by ``ast``, never imported) -> ``assess`` (the three put
together) -> ``section`` (workers, store, policy) -> ``report``; ``settings`` is the table.
"""
