"""The one exception type the CLI turns into a single clear line on stderr and exit code 2.

Raise `ArithsweepError` (or a subclass) for anything a user can cause: an unknown task, a bad
config value, a corrupt checkpoint, a malformed search space. Bugs stay ordinary exceptions.
"""


class ArithsweepError(ValueError):
    """A user-facing error; its message is printed as one line, without a traceback."""


class ConfigError(ArithsweepError):
    """A configuration value is invalid; the message names the field."""


class CheckpointError(ArithsweepError):
    """A checkpoint is missing, corrupt, or disagrees with its own config or metadata."""
