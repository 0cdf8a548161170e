"""arithsweep: search for the smallest transformer that does integer arithmetic.

Kept import-light on purpose: `arithsweep --help` and `arithsweep leaderboard` must not pull in
torch, ray or mlflow, so nothing heavy is imported here.
"""

__version__ = "0.1.0"
