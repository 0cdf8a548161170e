"""The tiny-model bench compares like with like: the plain loop's model has the parameters of
the arithsweep model it stands beside, and every row is a measured, positive figure."""

from __future__ import annotations

import pytest

from arithsweep.core.bench_tiny import PlainAdder, tiny_models, tiny_rows
from arithsweep.core.model import tiny_layout as TL
from arithsweep.core.model.model import count_params


def test_the_plain_model_is_the_87_parameter_model():
    (label, task, cfg), (label60, _, cfg60) = tiny_models()
    assert (label, label60) == ("87p", "60p")
    plain = PlainAdder(task.vocab_size)
    assert sum(p.numel() for p in plain.parameters()) == count_params(cfg) == 87
    assert count_params(cfg60) == 60
    tokens, _ = task.encode(*task.sample(4, __import__("torch").Generator(), "uniform"))
    assert plain(tokens[:, :-1]).shape == (4, task.seq_len - 1, task.vocab_size)


@pytest.mark.skipif(TL.load_error() is not None,  # its tiny rows need the kernel built
                    reason=f"tiny kernel unavailable: {TL.load_error()}")
def test_quick_tiny_rows_measure_each_layout_against_the_reference_and_the_plain_loop():
    lines: list[str] = []
    rows = tiny_rows(quick=True, device="cpu", log=lines.append)
    assert [r["layout"] for r in rows if r["model"] == "87p"] == [
        "plain PyTorch loop", "reference, 1 seed", "reference, 8 seeds packed",
        "tiny, 8 seeds packed", "default (train's choice), 8 seeds"]
    assert all(r["examples_per_s"] > 0 for r in rows)
    one = next(r for r in rows if r["model"] == "87p" and r["layout"] == "reference, 1 seed")
    assert one["vs_1_seed"] == 1.0 and one["vs_plain"] > 0 and one["used"].startswith("ref")
    # every row says which layout train really used: the default picks the tiny one here
    default = [r for r in rows if r["layout"].startswith("default")]
    assert len(default) == 2 and all(r["used"].startswith("tiny") for r in default)
    best = max(r["examples_per_s"] for r in rows
               if r["model"] == "87p" and r["layout"].startswith("reference"))
    for r in rows:
        if "vs_best_reference" in r and r["model"] == "87p":
            assert abs(r["vs_best_reference"] * best - r["examples_per_s"]) < 1e-6 * best
    assert len(lines) == len(rows)


def test_a_gpu_bench_measures_no_tiny_kernel_layout():
    from arithsweep.core.bench_tiny import layouts_for
    for quick in (True, False):
        cpu, gpu = layouts_for("cpu", quick), layouts_for("cuda", quick)
        assert any(r[4] == "tiny" for r in cpu)  # the CPU bench keeps the kernel's rows
        assert gpu and all(r[4] != "tiny" for r in gpu)
        assert gpu[0] == cpu[0]  # the `vs 1 seed` base is the same row on both
