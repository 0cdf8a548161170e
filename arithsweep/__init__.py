"""arithsweep: search for the smallest transformer that does integer arithmetic.

Four wings, imports one way (`tests/test_layout.py`): core (problems, models, training,
evaluation), search (Ray Tune + Optuna) and leaderboard (verification, the board) on it, and cli
(the `arithsweep` command; `python -m arithsweep` runs it through __main__) on top of all three.

Kept import-light on purpose: `arithsweep --help` and `arithsweep leaderboard` must not pull in
torch, ray or mlflow, so nothing heavy is imported here.
"""

__version__ = "0.1.0"
