"""The floor under every other: errors, dtypes, provenance (where the user wrote things)."""
