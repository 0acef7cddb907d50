"""The fleet: qualify on other machines of a team's cluster, reached through Ray or Slurm.

The parts, each one job:

- ``unit``: the plain-JSON unit of work sent to a node and the tagged result that comes back.
- ``secrets``: what must never leave the driver (passwords in URLs, tokens in the environment).
- ``hardware_profile`` (top level, beside the section contract that hands it to a section's
  ``fit_plan``): a node's hardware profile, grouping nodes by it, choosing which nodes run.
- ``node_side``: the standard-library code that runs on a node (hardware facts, running a unit).
- ``devices``: what a unit was given (GPUs, accelerators) and saw; short of GPUs: not checked.
- ``section_unit``: one section of a run on a node (its environments, devices, cache).
- ``relay``: the store a node writes to, each write sent home as a plain JSON record.
- ``executor``: the one contract every engine provides (units on nodes, one host per node
  for ``--nodes``); ``connect``: which engine a ``--fleet`` address names, connected.
- ``ray_executor``: that contract on Ray; ``ray_connect``: connecting to a cluster;
  ``ray_spread``: actors on distinct nodes (one rank host per node).
- ``slurm_executor``: that contract on Slurm (``--fleet slurm[:PARTITION]``);
  ``slurm_cli``: the only module running Slurm's commands; ``slurm_node``: what a job runs
  on its node; ``slurm_follow``: each unit's records and end, read back; ``slurm_hosts``:
  one host per node over srun.
- ``node_daemon``: what dies when a drill kills a node (Ray's raylet, Slurm's slurmd).
- ``driver``: a run across the fleet (``run --fleet``): choose nodes, ship sections, commit.
- ``across_nodes``: ``--fleet --nodes N``, one rank per node, the venue the plan's section
  gives (``bench/across_nodes.py``: the collectives; ``drill/across_nodes.py``: the drills).
- ``node_link``: cutting or slowing one node's link to the others (a drill's fault).

Importing this package does not import Ray: ``ray_connect`` imports it when ``connect``
is called; ``connect`` imports an engine's modules only when its address is given.
"""
