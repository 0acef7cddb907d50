"""The calls section's in-environment half: record the torch calls a user's code makes
(``record``), encode them (``encode``) and replay them one at a time, isolated (``replay``)."""
