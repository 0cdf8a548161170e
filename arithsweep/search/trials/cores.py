"""Spare cores: a search trial running alone takes the CPUs no other trial holds, and gives them
back when another trial waits.

A search on a 2-core laptop runs one trial per core (`cpus_per_trial` 1: two processes beat
one process on both cores, docs/benchmarks.md). But at times one trial runs alone (the last
trial of a search, a searcher holding its next proposal until a verification ends, `-j 1`),
and a 64-seed trial of a frontier shape then takes hours on one core while the other idles.
Ray Tune's `ResourceChangingScheduler` re-sizes live trials; `SpareCores` is its allocation
function: Tune's `DistributeResources` (the cluster's CPUs shared evenly over the live
trials, pending ones included, never below what a trial started with), asked only at a
result that carries the trial's saved state (`STATE_SAVED`). A re-sized trial is paused,
then restarted from that state with its new CPUs (`trainable.run_trial` reads them and sets
its threads), so a change costs a restart and no training step: the state is the very step
the result reports, and the kernel's thread count does not change what it computes. While it
holds more than its share a trial saves its state at least every `GROWN_STATE_SECONDS`, so a
trial that starts waiting gets its core back within about that.

Driver side (the scheduler) and worker side (`trial_cpus`); `tuner.new_tuner` builds it with:

    from arithsweep.search.trials.cores import scheduler
    scheduler(cpus_per_trial=1.0, gpus=0.0, node_cpus=2)   # None where it does not apply
"""

from __future__ import annotations

from typing import Any

STATE_SAVED = "state_saved"  # a Tune row's key: 1 where the row comes with the trial's state
GROWN_STATE_SECONDS = 60.0  # how often a trial holding spare cores saves its state, at most


def scheduler(cpus_per_trial: float, gpus: float, node_cpus: int) -> Any:
    """A ResourceChangingScheduler that lends spare cores, or None where it does not apply:
    GPU trials (their speed is the GPU's), fractional or sub-core trials, or nodes with no
    room for a second share (a trial's CPUs must fit on one node: its bundle is one)."""
    per = float(cpus_per_trial)
    if gpus or per < 1 or per != int(per) or node_cpus < 2 * per:
        return None
    from ray.tune.schedulers import ResourceChangingScheduler

    return ResourceChangingScheduler(
        resources_allocation_function=SpareCores(int(node_cpus // per) - 1, int(per)))


class SpareCores:
    """Tune's DistributeResources in steps of one trial's CPUs, capped at one node's, and only
    at a result with the trial's state. Picklable: Tune saves it with the scheduler."""

    def __init__(self, max_extra: int, per_trial: int) -> None:
        self.max_extra, self.per_trial = int(max_extra), int(per_trial)

    def __call__(self, tune_controller: Any, trial: Any, result: dict[str, Any],
                 scheduler: Any) -> Any:
        if not result.get(STATE_SAVED):  # a pause now would replay steps since the last state
            return None
        from ray.tune.schedulers.resource_changing_scheduler import DistributeResources

        share = DistributeResources(add_bundles=False, increase_by={"CPU": self.per_trial},
                              increase_by_times=self.max_extra)
        return share(tune_controller, trial, result, scheduler)


def trial_cpus(default: float) -> int:
    """The CPUs Tune gives this trial now (a re-sized trial's new ones), as threads; `default`
    (the search's cpus_per_trial) outside Tune or where it cannot say."""
    import warnings

    from ray import tune

    with warnings.catch_warnings():  # outside a trial Ray warns, then says None
        warnings.simplefilter("ignore")
        try:
            pgf = tune.get_context().get_trial_resources()
        except Exception:  # no Tune session at all (a runner built by hand)
            pgf = None
    cpus = default if pgf is None else pgf.required_resources.get("CPU", default)
    return max(1, int(float(cpus)))
