"""leaderboard wing."""
