"""search wing."""
