"""What the fleet tests share with the cluster fixture in conftest.py.

Kept out of conftest.py because ``tests/fixtures/conftest.py`` also answers to the module
name ``conftest`` when the whole suite runs.
"""

# The shared local Ray cluster: a head and two workers, each with its own
# `torchcanary.profile` label (and a custom resource) standing for a hardware profile.
FLEET_PROFILES = ("head-box", "alpha-box", "beta-box")
