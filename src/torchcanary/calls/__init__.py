"""Section "calls": the torch calls your code makes, recorded under the baseline and
replayed in the candidate (and in the baseline again, as the control), compared call by call.
"""
