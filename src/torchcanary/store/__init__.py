"""The results store: SQLite by default, with a versioned schema and migrations."""
