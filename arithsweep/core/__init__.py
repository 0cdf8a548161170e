"""core wing."""
