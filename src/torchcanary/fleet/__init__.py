"""The fleet: qualify on other machines of a team's cluster, reached through Ray.

The parts, each one job:

- ``unit``: the plain-JSON unit of work sent to a node and the tagged result that comes back.
- ``secrets``: what must never leave the driver (passwords in URLs, tokens in the environment).
- ``profile``: a node's hardware profile, grouping nodes by it, choosing which nodes run.
- ``node_side``: the standard-library code that runs on a node (hardware facts, running a unit).
- ``executor``: the small interface every executor provides (Ray now, Slurm later).
- ``ray_executor``: that interface on Ray; the only module that imports Ray.

Importing this package does not import Ray; only ``ray_executor`` does, when a fleet is used.
"""
