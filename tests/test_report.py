"""VerificationReport and its statistics (Wilson lower bound, Quirke's nines), by hand values.

    .venv/bin/python -m pytest tests/test_report.py -q
"""

from __future__ import annotations

import json
import math

import pytest

from arithsweep import __version__
from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.report import SUITE, Bucket, VerificationReport, nines, wilson_lower


def make_report(**over) -> VerificationReport:
    """A small, fully populated report; tests override what they exercise."""
    kw = dict(
        task="add3", format="pad-rev", target=0.99, params=777,
        exact_match=0.999, n_problems=1000, n_failures=1,
        failures=[{"problem": "123+456", "expected": 579, "got": 578}],
        nines=3, wilson_lower=wilson_lower(999, 1000),
        by_carry={"S0": Bucket(600, 600), "S1": Bucket(400, 399)},
        by_lengths={"3x3": {"n": 900, "correct": 899}, "3x2": Bucket(100, 100)},
        by_answer_len={"4": Bucket(1000, 999)},
        suite_seed=1234, suite_size=1000, sha256="ab" * 32, checkpoint_path="/tmp/ck/best",
        architecture="1L d7 h1 ff14 relu ln tied learned",
        model_config={"d_model": 7, "n_layers": 1}, train_config={"lr": 0.01, "steps": 100},
        seed=1, steps=100, wall_time=1.5, device="cpu", mlflow_run_id="abc",
        search_name="s", trial_id="t1", reproduce="arithsweep train --task add3 --seed 1",
    )  # fmt: skip
    kw.update(over)
    return VerificationReport(**kw)


def wilson_by_hand(c: int, n: int, z: float = 1.959963984540054) -> float:
    p = c / n
    return (p + z * z / (2 * n) - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (
        1 + z * z / n
    )


def test_wilson_lower_hand_values():
    assert wilson_lower(0, 0) == 0.0
    assert wilson_lower(0, 10) == 0.0
    assert wilson_lower(100, 100) == pytest.approx(0.963, abs=5e-4)
    # p = 1: the bound is n / (n + z^2) exactly.
    assert wilson_lower(100, 100) == pytest.approx(100 / (100 + 1.959963984540054**2))
    assert wilson_lower(990, 1000) == pytest.approx(0.9817, abs=1e-4)
    assert wilson_lower(990, 1000) == pytest.approx(wilson_by_hand(990, 1000))
    assert wilson_lower(999_999, 10**6) == pytest.approx(wilson_by_hand(999_999, 10**6))
    assert wilson_lower(990, 1000) < 0.99  # a lower bound sits below the point estimate
    with pytest.raises(ArithsweepError):
        wilson_lower(11, 10)


@pytest.mark.parametrize(
    ("failures", "n", "expected"),
    [
        (1, 10**6, 6),
        (0, 10**6, 6),
        (0, 10**4, 4),
        (11, 10**6, 4),
        (10, 10**6, 5),
        (2, 10**6, 5),
        (1, 999_999, 5),
        (0, 0, 0),
        (5, 3, 0),
        (0, 9, 0),
        (0, 10, 1),
        (1, 10**7, 7),
    ],
)
def test_nines_tiers(failures, n, expected):
    assert nines(failures, n) == expected


def test_bucket():
    assert Bucket(4, 3).exact_match == 0.75
    assert Bucket(4, 3).failures == 1
    assert Bucket(0, 0).exact_match == 0.0
    assert Bucket.from_dict(Bucket(5, 2).to_dict()) == Bucket(5, 2)


def test_round_trip_through_json():
    r = make_report()
    d = json.loads(json.dumps(r.to_dict()))
    assert d["by_carry"]["S1"] == {"n": 400, "correct": 399}
    back = VerificationReport.from_dict(d)
    assert back == r
    assert isinstance(back.by_lengths["3x3"], Bucket)
    assert back.to_dict() == r.to_dict()


def test_defaults_and_qualifies():
    r = make_report(seed=None, mlflow_run_id=None)
    assert r.suite == SUITE == "v2"
    assert r.version == __version__
    assert r.verified_at.endswith("+00:00")
    assert r.qualifies
    assert not make_report(exact_match=0.87).qualifies
    assert make_report(exact_match=0.99, target=0.99).qualifies  # >=, not >
    assert r.correct == 999
    assert "777 params" in r.summary()
    assert set(r.breakdown()) == {"by_carry", "by_lengths", "by_answer_len", "by_class",
                                    "by_special", "by_op", "by_protocol"}


def test_from_dict_errors_are_one_line():
    d = make_report().to_dict()
    del d["sha256"]
    with pytest.raises(ArithsweepError, match="missing sha256"):
        VerificationReport.from_dict(d)
    with pytest.raises(ArithsweepError, match="JSON object"):
        VerificationReport.from_dict([1, 2])  # type: ignore[arg-type]
    d = make_report().to_dict() | {"added_by_a_newer_version": 1}
    assert VerificationReport.from_dict(d) == make_report(verified_at=d["verified_at"])


class FakeScalar:
    """Stands in for a numpy/torch scalar (has .item()) without importing either."""

    def __init__(self, v):
        self.v = v

    def item(self):
        return self.v


def test_array_scalars_become_plain_json():
    r = make_report(
        params=FakeScalar(777), exact_match=0.999,
        n_problems=1000, failures=[{"problem": "1+1", "expected": FakeScalar(2), "got": None}],
        by_carry={"S0": {"n": FakeScalar(3).item(), "correct": 3}},
    )  # fmt: skip
    assert type(r.params) is int and r.failures[0]["expected"] == 2
    json.dumps(r.to_dict())  # JSON-safe
    with pytest.raises(ArithsweepError, match="non-JSON value"):
        make_report(train_config={"x": object()})


def test_a_mixed_task_qualifies_only_when_each_operation_does():
    """Five nines overall can hide four on subtraction (11 failures in 1.13M, 6 of them in
    565K subtractions): a mix model qualifies when addition and subtraction each reach it."""
    both = {"add": Bucket(565_000, 564_995), "sub": Bucket(565_000, 564_995)}  # 5 + 5 failures
    lopsided = {"add": Bucket(565_000, 565_000), "sub": Bucket(565_000, 564_990)}  # 0 + 10
    kw = dict(task="mix6", target=0.99999, n_problems=1_130_000, n_failures=10,
              exact_match=1 - 10 / 1_130_000)
    assert make_report(**kw, by_op=both).qualifies
    r = make_report(**kw, by_op=lopsided)
    assert r.exact_match >= r.target and not r.qualifies
    assert r.by_op["sub"].nines == 4 and r.by_op["add"].nines == 5
    assert "sub 10 failures in 565,000 (4 nines)" in r.summary()
    back = VerificationReport.from_dict(r.to_dict())  # kept through JSON (the board's column)
    assert back.by_op == r.by_op and not back.qualifies
    assert make_report().qualifies and not make_report().by_op  # single-op tasks as before
