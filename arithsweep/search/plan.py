"""What a search says before it starts: where it starts, what it searches below, its bound and
its trial cap; and a search whose space holds nothing below its start stops before Ray starts.

A new search on a clone starts from the board's smallest entry of its task (see
`driver.run_search`), so its whole budget goes below that entry, and what it may find there is
bounded by the space's smallest model. `smallest_point` finds that model by walking every
combination of the space's model and format keys (train keys never change a model's size);
`check_room` refuses a search whose bound no point of its space is below, in one line (on
add3 the `microadder` space's smallest point is the board's 37: such a search used to spend
200 untrained proposals, then end with an empty table). `settle` gives the lines the search
starts with: where it starts, then the space, its smallest point, the bound, and the trial
cap with what ends the search (`options.trial_cap` decides the cap).

    python -c "from arithsweep.search.plan import smallest_point; \\
        from arithsweep.search.space.spaces import load_space; \\
        print(smallest_point(load_space('tbukic'), 'add10'))"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from arithsweep.core.arithmetic import ARITHMETIC, version_of
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.stats import OUTSIDE_BOARDS, PROTOCOLS
from arithsweep.core.train_config import TrainConfig
from arithsweep.search.space.spaces import RayDefineByRun, Space

# Combinations walked at most: the shipped spaces a search starts from below the board (tbukic,
# microadder) hold a few thousand; a wider one (adderboard, tiny's int widths) is not walked,
# and its smallest point is then unknown (never a reason to stop).
MAX_POINTS = 5000
SIZED = ("model", "format")  # the sections a model's size depends on


class _Walk:
    """An Optuna-trial stand-in for one combination: each size key takes the option its place
    in `path` names (the first past its end), and `widths` records how many options each had,
    so that `_combinations` can step through all of them as an odometer. Other keys take their
    first option (a train key does not size a model) unless a size key's `when` reads them."""

    def __init__(self, path: list[int], sized: set[str]) -> None:
        self.path, self.sized, self.widths, self.picked = path, sized, [], []

    def _pick(self, name: str, options: list[Any]) -> Any:
        if name not in self.sized:
            return options[0]
        i = len(self.widths)
        self.widths.append(len(options))
        self.picked.append(self.path[i] if i < len(self.path) else 0)
        return options[self.picked[-1]]

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return self._pick(name, list(choices))

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        return self._pick(name, list(range(low, high + 1, step)))

    def suggest_float(self, name: str, low: float, high: float, log: bool = False) -> float:
        return low  # a float model key (an init, a rope base) is no size


def _combinations(space: Space, limit: int):
    """Every combination of the space's size keys as a flat trial config, the conditional ones
    reached as the define-by-run walk reaches them; stops (returns False) past `limit`."""
    sized = {p.name for p in space.searched if p.section in SIZED}
    sized |= {c.key for p in space.params if p.section in SIZED for c in p.when}
    path: list[int] = []
    for _ in range(limit):
        walk = _Walk(path, sized)
        yield RayDefineByRun(space)(walk)
        # the next combination: the last key with an option left moves on, the rest restart
        k = next((k for k in reversed(range(len(walk.widths)))
                  if walk.picked[k] + 1 < walk.widths[k]), None)
        if k is None:
            return True
        path = [*walk.picked[:k], walk.picked[k] + 1]
    return False


def smallest_point(space: Space, task: str, limit: int = MAX_POINTS) -> int | None:
    """Unique parameters of the space's smallest valid model for `task`; None when the space
    has more than `limit` combinations of its size keys (or no valid one)."""
    from arithsweep.search.trials.configs import ProposalSizer

    sizer = ProposalSizer({"task": task})
    walk = _combinations(space, limit)
    sizes = []
    while True:
        try:
            config = next(walk)
        except StopIteration as done:
            if not done.value:
                return None  # not all walked: unknown
            break
        n = sizer(config)
        if n:
            sizes.append(n)
    return min(sizes, default=None)


def settle(opts: Any, space: Space, task: str, start: dict | None, unused: str | None,
           stored: dict[str, Any], sdir: Path) -> tuple[int | None, list[str]]:
    """(the trial cap, the lines the search starts with: where it starts, then where and how
    long it searches) for `driver._settle`; ConfigError (one line) when it would train
    nothing: its space holds no point below its start, or a resume's cap is spent."""
    from arithsweep.search.options import DEFAULT_TRIALS, trial_cap
    from arithsweep.search.propose.incumbent import incumbent_of, load_verified

    cap, why = trial_cap(opts.trials, opts.time_budget, stored)
    smallest = smallest_point(space, task)
    ran = None
    if opts.resume:
        ran = _read(sdir / "summary.json").get("n_tune_trials")
        ran = ran if isinstance(ran, int) else None  # a run killed before its summary: unknown
        if cap is not None and ran is not None and cap <= ran:
            raise ConfigError(
                f"--resume {opts.resume}: {ran} trials ran already and its cap is {cap} in "
                f"all ({why}), so it would train nothing; give the new total, e.g. -n "
                f"{ran + DEFAULT_TRIALS}")
        inc = incumbent_of(load_verified(sdir))
        first = f"resuming search {opts.resume}: " + (
            f"its smallest verified model has {inc} p" if inc else "no model verified yet")
        if version_of(stored) != ARITHMETIC:  # --restart-unfinished (driver._stored_options)
            first += (f"; started under arithmetic {version_of(stored)}, its finished trials "
                      f"stand and its unfinished ones train again from step 0 under "
                      f"arithmetic {ARITHMETIC}")
    else:
        inc = start and int(start["params"])
        if not opts.frontier:  # --frontier trains every size: the start bounds nothing
            check_room(space, task, start, opts.max_params, smallest)
        where = (f"from space {space.name}'s start point{'s' if len(space.start) > 1 else ''} "
                 f"({_start_size(space, task)})"
                 if space.start else f"from space {space.name}'s first samples (it names no "
                 "start point)")
        first = "starting " + (start["note"] if start else unused or (
            where + (", as --fresh asks" if opts.fresh else "")))
    bound = bound_of(None if opts.frontier else inc, opts.max_params)
    lines = [first, _where(space, bound, opts.max_params, smallest, opts.frontier)
             + "; " + _how_long(cap, why, ran, opts.time_budget)]
    return cap, lines + _aim(task, opts)


def _aim(task: str, opts: Any) -> list[str]:
    """The line saying that its trials stop above the target (tuner.constants), when an outside
    board checks the task's finds on its own sample."""
    from arithsweep.search.options import train_target

    target = opts.target if opts.target is not None else TrainConfig.target
    aim = train_target(opts, task, target)
    if opts.train_target or aim <= target:  # a stop the user chose, or none above the target
        return []
    key, n = OUTSIDE_BOARDS[task]
    return [f"its trials stop at {aim:g} held-out, not {target:g}: a find must also pass "
            f"{PROTOCOLS[key][0]} (its own {n:,} problems, at {PROTOCOLS[key][1]:.0%})"]


def _start_size(space: Space, task: str) -> str:
    """The unique parameters of the space's start points, in the order a new search tries them
    ("36 p" or "36 p, then 44 p"; "?" for a point that is not a valid model)."""
    from arithsweep.search.propose.shrink import _full_config
    from arithsweep.search.trials.configs import ProposalSizer

    sizer = ProposalSizer({"task": task})
    sizes = [(sizer(c) if (c := _full_config(space, p)) else 0) or "?" for p in space.start]
    return ", then ".join(f"{n} p" for n in sizes)


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def bound_of(start_params: int | None, max_params: int | None) -> int | None:
    """The size every proposal must be below from the first one on (None: none yet)."""
    limits = [n for n in (start_params, None if max_params is None else max_params + 1)
              if n is not None]
    return min(limits, default=None)


def check_room(space: Space, task: str, start: dict | None, max_params: int | None,
               smallest: int | None) -> None:
    """ConfigError (one line) when the space's smallest point is not below the search's bound:
    every proposal would be told untrained, so the search stops before it starts."""
    bound = bound_of(start and int(start["params"]), max_params)
    if bound is None or smallest is None or smallest < bound:
        return
    what = (f"--max-params {max_params}" if start is None or (
        max_params is not None and max_params + 1 < int(start["params"]))
            else f"its start, {_start_name(start)} ({start['params']} p)")
    fresh = "; --fresh starts from the space's start point" if start and start.get(
        "board") else ""
    raise ConfigError(f"nothing to search: space {space.name}'s smallest {task} model has "
                      f"{smallest} p, not below {what}; a space with smaller points "
                      f"(--space, see arithsweep spaces) can go below it{fresh}")


def _start_name(start: dict) -> str:
    return (f"the board's smallest {start['task']} entry {start['entry_id']}"
            if start.get("board") else f"entry {start['entry_id']}")


def _where(space: Space, bound: int | None, max_params: int | None, smallest: int | None,
           frontier: bool) -> str:
    """Where it searches: the space, below what bound (and whose), its smallest point."""
    floor = ("its smallest point unknown: too many shapes to walk" if smallest is None
             else f"its smallest point {smallest} p")
    if max_params is not None and bound == max_params + 1:
        floor += f", --max-params {max_params}"
    if frontier:
        return f"searching space {space.name} at every size, --frontier ({floor})"
    if bound is None:
        return (f"searching space {space.name} from its start point down ({floor}), below "
                "each model it verifies")
    return f"searching space {space.name} below {bound} p ({floor})"


def _how_long(cap: int | None, why: str, ran: int | None, time_budget: float) -> str:
    """What ends it: the trial cap (and where it comes from), the time budget."""
    budget = f"the time budget of {_duration(time_budget)}" if time_budget else "no time budget"
    if cap is None:
        return f"no trial cap: {budget} ends it (--trials N caps it)"
    before = f", {ran} run before" if ran else ""
    return f"at most {cap} trial{'s' if cap != 1 else ''} in all ({why}{before}), {budget}"


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
