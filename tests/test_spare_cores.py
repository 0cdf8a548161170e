"""search.cores' allocation function on Tune's own DistributeResources, with a stand-in for
Tune's controller (the running search is tested in test_search.py: a lone trial is lent the
idle core there and trains the same curve). Here the rules: only at a row with a state, the
idle cores to a lone trial, back to its share when another waits, never above one node.

    .venv/bin/python -m pytest tests/test_spare_cores.py -q
"""

from __future__ import annotations

from types import SimpleNamespace

from ray.tune.execution.placement_groups import PlacementGroupFactory

from arithsweep.search.trials.cores import STATE_SAVED, SpareCores, scheduler, trial_cpus

ROW = {"training_iteration": 3, STATE_SAVED: 1}


def _trial(cpus: float):
    return SimpleNamespace(placement_group_factory=PlacementGroupFactory([{"CPU": cpus}]))


def _lend(total: int, trial, others=(), max_extra: int = 1, row=ROW) -> float | None:
    live = [trial, *others]
    controller = SimpleNamespace(get_live_trials=lambda: live, _resource_updater=SimpleNamespace(
        get_num_cpus=lambda: total, get_num_gpus=lambda: 0))
    sched = SimpleNamespace(base_trial_resources=PlacementGroupFactory([{"CPU": 1}]))
    pgf = SpareCores(max_extra, 1)(controller, trial, row, sched)
    return None if pgf is None else pgf.required_resources.get("CPU")


def test_a_lone_trial_is_lent_the_idle_core_at_a_row_with_its_state():
    assert _lend(2, _trial(1)) == 2
    assert _lend(2, _trial(1), row={"training_iteration": 3}) is None  # a pause would replay


def test_two_trials_keep_their_share_and_a_waiting_one_gets_its_core_back():
    assert _lend(2, _trial(1), [_trial(1)]) == 1
    assert _lend(2, _trial(2), [_trial(1)]) == 1  # lent, then another trial is pending


def test_never_above_one_node():
    assert _lend(4, _trial(1), max_extra=1) == 2  # 4 CPUs over two 2-CPU nodes
    assert _lend(4, _trial(1), max_extra=3) == 4


def test_where_lending_does_not_apply_there_is_no_scheduler():
    assert scheduler(1.0, 0.0, 2) is not None
    assert scheduler(1.0, 1.0, 2) is None  # a GPU trial: its speed is the GPU's
    assert scheduler(0.5, 0.0, 2) is None and scheduler(1.5, 0.0, 4) is None
    assert scheduler(1.0, 0.0, 1) is None and scheduler(2.0, 0.0, 3) is None


def test_outside_a_tune_trial_the_threads_are_the_searchs_share():
    assert trial_cpus(1.0) == 1 and trial_cpus(2.0) == 2
