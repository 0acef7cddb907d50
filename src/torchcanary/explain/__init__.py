"""The explain section: for each finding that moves the decision, what moved, why, and
what would undo it, measured in runs of its own after every other section."""
