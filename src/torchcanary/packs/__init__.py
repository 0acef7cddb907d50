"""Release packs: the claims of one release (a data file quoting its notes) plus their probes.

Packs are found through the ``torchcanary.packs`` entry-point group; a new release is a new
pack in its own package, with no edit to torchcanary. Nothing here imports torch.
"""
