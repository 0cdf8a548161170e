"""The result of verifying one checkpoint (suite "v2"), and the statistics it is scored with.

`VerificationReport` is the only thing the leaderboard accepts: `verify.py` builds one from the
weights alone, `leaderboard.Leaderboard.record` stores it. This module is pure standard library
so that the leaderboard, the tables and `arithsweep leaderboard` never pull in torch.

    python -c "from arithsweep.leaderboard.report import *; print(SUITE)"
The statistics it is scored with (`wilson_lower`, `nines`) live in
`arithsweep.core.evaluation.stats`, because training's early stop uses the same bound.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

from arithsweep import __version__
from arithsweep.core.errors import ArithsweepError
from arithsweep.core.evaluation.stats import (  # noqa: F401  (Z95: part of a report's API)
    PROTOCOLS,
    Z95,
    nines,
    protocol_line,
    wilson_lower,
)

# v2 (v1 + Quirke-enriched holdout part, lengths part distinct from the random part); an entry
# keeps the suite name it was verified with
SUITE = "v2"
TARGET = 0.99  # the exact match an entry is verified at, unless it was verified at another


def utc_now() -> str:
    """The current time as ISO-8601 UTC, to the second (e.g. "2025-01-31T12:00:00+00:00")."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class Bucket:
    """Problems checked and answered exactly in one slice (a carry class, a length pair...)."""

    n: int
    correct: int

    @property
    def exact_match(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def failures(self) -> int:
        return self.n - self.correct

    @property
    def nines(self) -> int:
        """Quirke's nines for this slice alone (see arithsweep.core.evaluation.stats.nines)."""
        return nines(self.failures, self.n)

    def to_dict(self) -> dict[str, int]:
        return {"n": self.n, "correct": self.correct}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Bucket:
        return cls(n=int(d["n"]), correct=int(d["correct"]))

    def __post_init__(self) -> None:
        self.n, self.correct = int(self.n), int(self.correct)


def _buckets_to_dict(buckets: dict[str, Bucket]) -> dict[str, dict[str, int]]:
    return {str(k): b.to_dict() for k, b in buckets.items()}


def _buckets_from_dict(d: dict[str, Any]) -> dict[str, Bucket]:
    return {str(k): v if isinstance(v, Bucket) else Bucket.from_dict(v) for k, v in d.items()}


_BUCKET_FIELDS = ("by_carry", "by_lengths", "by_answer_len", "by_class", "by_special", "by_op",
                  "by_protocol")

_SCALARS = {
    "target": float, "params": int, "exact_match": float, "n_problems": int, "n_failures": int,
    "nines": int, "wilson_lower": float, "suite_seed": int, "suite_size": int, "seed": int,
    "steps": int, "wall_time": float,
}  # fmt: skip


def _json_safe(x: Any) -> Any:
    """x as plain JSON values: numpy/torch scalars via .item(), arrays via .tolist()."""

    def plain(o: Any) -> Any:
        for attr in ("item", "tolist"):
            if hasattr(o, attr):
                return getattr(o, attr)()
        raise ArithsweepError(f"verification report holds a non-JSON value {o!r}")

    return json.loads(json.dumps(x, default=plain))


# kw_only: 30-odd fields are only ever passed by name, and it lets the optional provenance
# fields (seed, MLflow run, ...) default to None wherever they sit.
@dataclass(kw_only=True)
class VerificationReport:
    """Everything the verifier measured about one checkpoint; JSON-safe via to_dict/from_dict."""

    task: str
    format: str
    target: float
    params: int  # recomputed from the loaded tensors by the verifier, never from metadata
    exact_match: float
    n_problems: int
    n_failures: int
    failures: list[dict] = field(default_factory=list)  # first few {"problem","expected","got"}
    nines: int = 0
    wilson_lower: float = 0.0
    by_carry: dict[str, Bucket] = field(default_factory=dict)  # "S0".."Sk"
    by_lengths: dict[str, Bucket] = field(default_factory=dict)  # "3x2": operand digit lengths
    by_answer_len: dict[str, Bucket] = field(default_factory=dict)
    by_class: dict[str, Bucket] = field(default_factory=dict)  # Quirke's S0.., M0.., N1..
    # result 0, an operand all nines, the longest carry chains (overlapping; see evaluate)
    by_special: dict[str, Bucket] = field(default_factory=dict)
    by_op: dict[str, Bucket] = field(default_factory=dict)  # mix tasks: "add", "sub" apart
    # an outside board's protocol on its own problems, not part of the suite: add10's
    # "adderboard" (AdderBoard's 10,010, leaderboard/adderboard_check.py)
    by_protocol: dict[str, Bucket] = field(default_factory=dict)
    suite: str = SUITE
    suite_seed: int = 0
    suite_size: int = 0
    sha256: str
    checkpoint_path: str  # absolute path of the checkpoint directory
    architecture: str = ""  # short label like "1L d7 h1 ff14 relu ln tied learned"
    model_config: dict = field(default_factory=dict)
    train_config: dict = field(default_factory=dict)
    seed: int | None = None
    steps: int | None = None
    wall_time: float | None = None
    device: str | None = None
    mlflow_run_id: str | None = None
    search_name: str | None = None
    trial_id: str | None = None
    reproduce: str = ""  # exact shell command that reproduces the training
    version: str = __version__
    verified_at: str = field(default_factory=utc_now)

    def __post_init__(self) -> None:
        # Accept plain dicts for the buckets so callers (and from_dict) need not wrap them.
        for name in _BUCKET_FIELDS:
            setattr(self, name, _buckets_from_dict(getattr(self, name) or {}))
        # The verifier computes with numpy/torch; their scalars are not JSON (nor SQL) values.
        for name, kind in _SCALARS.items():
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, kind(value.item() if hasattr(value, "item") else value))
        for name in ("failures", "model_config", "train_config"):
            setattr(self, name, _json_safe(getattr(self, name)))

    def shortfalls(self) -> list[str]:
        """What falls below the target: the whole suite's exact match, or else each operation
        of a mixed task that does (Quirke counts a mix model's nines per operation, and a
        whole-suite figure can hide a weaker one). Empty when the result qualifies."""
        if self.exact_match < self.target:
            return [f"exact match {self.exact_match:.6f}"]
        return [f"{k} exact match {b.exact_match:.6f}" for k, b in self.by_op.items()
                if b.exact_match < self.target]

    def protocol_shortfalls(self) -> list[str]:
        """An outside protocol the model fails at a target at or above that board's own bar:
        a search holds its add10 finds to AdderBoard's 99% too (the suite and AdderBoard's
        10,010 problems are two samples, and a 99.0% model can pass one and fail the other).
        Not part of `qualifies`: an entry verified on the suite keeps its place."""
        return [protocol_line(k, b) for k, b in self.by_protocol.items()
                if self.target >= PROTOCOLS.get(k, ("", 1.0))[1] > b.exact_match]

    @property
    def qualifies(self) -> bool:
        """True when the verified exact match reaches the target (design: EM >= target) and,
        for a mixed task, addition and subtraction each reach it on their own."""
        return not self.shortfalls()

    @property
    def correct(self) -> int:
        return self.n_problems - self.n_failures

    def breakdown(self) -> dict[str, dict[str, dict[str, int]]]:
        """The bucket maps as plain JSON: {"by_carry": {...}, "by_lengths": ..., ...}."""
        return {name: _buckets_to_dict(getattr(self, name)) for name in _BUCKET_FIELDS}

    def class_table(self) -> list[dict[str, Any]]:
        """Per Quirke class: problems, failures, exact match and nines, in class order."""
        return [{"class": k, "problems": v.n, "failures": v.failures,
                 "exact_match": v.exact_match, "nines": v.nines} for k, v in self.by_class.items()]

    def measured(self) -> str:
        """The summary's figures without its verdict: task, params, exact match, failures,
        nines, Wilson bound and, for a mixed task, each operation's failures and nines."""
        line = (f"{self.task}: {self.params} params, exact match {self.exact_match:.6%} "
                f"({self.n_failures} failures in {self.n_problems:,}), {self.nines} nines, "
                f"Wilson lower {self.wilson_lower:.6f}")
        ops = ", ".join(f"{k} {b.failures} failures in {b.n:,} ({b.nines} nines)"
                        for k, b in self.by_op.items())
        line = f"{line}; by operation: {ops}" if ops else line
        outside = "; ".join(protocol_line(k, b) for k, b in self.by_protocol.items())
        return f"{line}; {outside}" if outside else line

    def summary(self) -> str:
        """One line for logs: the measured figures and the verdict."""
        verdict = "qualifies" if self.qualifies else "does not qualify"
        return f"{self.measured()}; {verdict} for target {self.target:g}"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)  # asdict already turns the Bucket values into {"n", "correct"}
        for name in _BUCKET_FIELDS:
            d[name] = _buckets_to_dict(getattr(self, name))
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VerificationReport:
        """Inverse of to_dict. Unknown keys are ignored (a newer arithsweep may add fields)."""
        if not isinstance(d, dict):
            kind = type(d).__name__
            raise ArithsweepError(f"a verification report must be a JSON object, not {kind}")
        known = {f.name for f in fields(cls)}
        required = {
            f.name
            for f in fields(cls)
            if f.default is MISSING and f.default_factory is MISSING
        }
        missing = sorted(required - d.keys())
        if missing:
            raise ArithsweepError(f"verification report is missing {', '.join(missing)}")
        return cls(**{k: v for k, v in d.items() if k in known})
