"""Shrink moves: the one-step-smaller neighbours of a verified incumbent, tried next.

TPE samples the whole region below the incumbent's size, and most of that region is far from
anything known to train (measured on add3: after a 325-parameter incumbent, a 20-minute search
spent its trials on 100-200 parameter proposals that never left chance). The cheapest good
next proposal is usually the incumbent minus one step on one dimension: a unit off d_model or
d_ff, one more tie, one norm fewer, keeping the training recipe that just worked. So when a
new incumbent is verified, the searcher enqueues a few of its shrink moves into the Optuna
study (the boldest first, then a spread down to the gentlest), and TPE goes on from there:
a coordinate descent on the parameter count, interleaved with the sampler's exploration.

A move changes one searched `model.*` key and keeps every other searched key (the training
recipe included), and it counts only if the proposal stays valid and gets smaller.

A search started from a board entry (`arithsweep search --from-entry`) descends from the
entry: `map_entry` finds the entry's point in the space (each searched key takes the entry's
value where the space allows it) and says which keys could not be mapped. `Descending` is the
searcher's part that queues them (a mixin of `searcher.ConstrainedOptunaSearch`).

    python -c "from arithsweep.search.propose.shrink import *; \\
        from arithsweep.search.space.spaces import *; \\
        from arithsweep.search.trials.configs import ProposalSizer; s = load_space('tiny'); \\
        print(shrink_moves(s, s.start[0], ProposalSizer({'task': 'add3'})))"
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from arithsweep.search.space.fields import fmt_value
from arithsweep.search.space.spaces import RayDefineByRun, Space

log = logging.getLogger(__name__)

MOVES_PER_INCUMBENT = 3  # enqueued per new incumbent; TPE fills the other proposals
MOVE_OF = "move_of"  # a queued shrink move's Optuna user attr: the incumbent's size it shrinks


class _PointTrial:
    """An Optuna-trial stand-in for define-by-run sampling at a given point: a searched key
    the point lacks (a start point names only some) takes its first choice or its low end,
    which only sizes the proposal; Optuna samples such keys when the move is tried."""

    def __init__(self, point: dict[str, Any]) -> None:
        self.point = point

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return self.point.get(name, choices[0])

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        return self.point.get(name, low)

    def suggest_float(self, name: str, low: float, high: float, log: bool = False) -> float:
        return self.point.get(name, low)


def _full_config(space: Space, point: dict[str, Any]) -> dict[str, Any] | None:
    """The flat trial config (fixed keys too) at a point of searched values; None when the
    point holds a conditional key that the sample no longer reaches (its `when` turned false)."""
    config = RayDefineByRun(space)(_PointTrial(point))
    searched = {p.name for p in space.searched}
    if {k for k in point if k in searched} - set(config):
        return None
    return config


def _reachable(space: Space, point: dict[str, Any]) -> dict[str, Any]:
    """`point` without the conditional keys a move switched off (tie_o on drops rank_o, whose
    `when` asks for tie_o off): a structural step, not an invalid point."""
    config = RayDefineByRun(space)(_PointTrial(point))
    searched = {p.name for p in space.searched}
    return {k: v for k, v in point.items() if k not in searched or k in config}


def _neighbour_values(space: Space, key: str, value: Any) -> list[Any]:
    p = next(p for p in space.searched if p.name == key)
    if p.kind == "choice":
        numbers = [c for c in p.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
        if len(numbers) == len(p.choices) and value in numbers:  # an ordered ladder: one rung
            return [max(c for c in numbers if c < value)] if value > min(numbers) else []
        return [c for c in p.choices if c != value]
    if p.kind == "int":
        return [value - p.step] if value - p.step >= p.low else []
    return []  # float model keys have no natural "one step smaller"


def shrink_moves(space: Space, point: dict[str, Any], sizer: Callable[[dict], int],
                 limit: int = MOVES_PER_INCUMBENT, below: int | None = None,
                 ) -> list[dict[str, Any]]:
    """Up to `limit` points one step from `point` (searched keys -> values, as Optuna trial
    params), each strictly smaller by `sizer`: the smallest first, then evenly spread sizes
    up to the largest.

    `below`: a bound under the point's own size (`--max-params`), which few one-step moves
    clear. The moves are then the points nearest to `point` under it: one key changed, else
    two, the largest first (the fewest ties a known-good shape must take on). From the 42 p a
    search below the 36 starts from (entry 59), the one-step moves under 37 p are a plain
    transpose of the MLP (36 p) and bolder steps (d 2, ReLU: 27-33 p, none of which trained);
    tbukic's 36 is two keys and two ties away."""
    base = _full_config(space, point)
    size = sizer(base) if base is not None else 0
    if not size:
        return []
    bounded = below is not None and below < size
    cap = below if bounded else size
    steps = _steps(space, point)
    found: dict[tuple, tuple[int, int, dict[str, Any]]] = {}
    pairs = [(a,) for a in steps]
    if bounded:
        pairs += [(a, b) for i, a in enumerate(steps) for b in steps[i + 1:] if a[0] != b[0]]
    for change in pairs:
        moved = _reachable(space, {**point, **dict(change)})
        config = _full_config(space, moved)
        n = sizer(config) if config is not None else 0
        if 0 < n < cap:
            found.setdefault(tuple(sorted(moved.items(), key=str)), (len(change), n, moved))
    if bounded:  # the nearest first: fewest keys changed, then the largest under the bound
        return [m for _, _, m in sorted(found.values(), key=lambda x: (x[0], -x[1]))][:limit]
    ranked = [moved for _, _, moved in sorted(found.values(), key=lambda x: x[1])]
    if len(ranked) <= limit:
        return ranked
    # the boldest move first (it saves the most if it trains), then an even spread up to
    # the gentlest, so one failed bold step does not leave the search with nothing nearby
    picks = sorted({round(i * (len(ranked) - 1) / (limit - 1)) for i in range(limit)})
    return [ranked[i] for i in picks]


def _steps(space: Space, point: dict[str, Any]) -> list[tuple[str, Any]]:
    """Every (searched model key, its neighbour value) one step from `point`."""
    searched = {p.name for p in space.searched}
    return [(key, new) for key, value in point.items()
            if key.startswith("model.") and key in searched
            for new in _neighbour_values(space, key, value)]


# --------------------------------------------------------------------------------------------
# A board entry's point in a space (arithsweep search --from-entry)

_NONE = object()


def _same(a: Any, b: Any) -> bool:
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _EntryTrial:
    """Walks a space define-by-run with an entry's values (flat `section.field` keys): a
    searched key the walk reaches takes the entry's value where the space allows it, else its
    first choice or low end (which only sizes the point), recorded as not mapped."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values, self.point, self.unmapped = values, {}, []

    def _take(self, name: str, value: Any, fallback: Any, allowed: str) -> Any:
        if value is _NONE:
            got = self.values.get(name, _NONE)
            self.unmapped.append(f"{name}={'unset' if got is _NONE else fmt_value(got)} "
                                 f"(space: {allowed})")
            return fallback
        self.point[name] = value
        return value

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        v = self.values.get(name, _NONE)
        hit = next((c for c in choices if v is not _NONE and _same(c, v)), _NONE)
        return self._take(name, hit, choices[0], ", ".join(fmt_value(c) for c in choices))

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        v = self.values.get(name, _NONE)
        ok = (_number(v) and float(v).is_integer() and low <= v <= high
              and (int(v) - low) % step == 0)
        return self._take(name, int(v) if ok else _NONE, low,
                          f"{low}..{high}" + (f" step {step}" if step > 1 else ""))

    def suggest_float(self, name: str, low: float, high: float, log: bool = False) -> float:
        v = self.values.get(name, _NONE)
        ok = _number(v) and low <= v <= high
        return self._take(name, float(v) if ok else _NONE, low,
                          f"{fmt_value(low)}..{fmt_value(high)}")


def map_entry(space: Space, values: dict[str, Any], task: str) -> dict[str, Any]:
    """An entry's point in `space`: {"point": searched key -> the entry's value (what the
    shrink moves start from), "unmapped": ["key=value (space: allowed)", ...] (searched keys
    whose entry value the space does not allow: they take the first choice or low end for
    sizing, and Optuna samples them in each move), "differs": ["key entry -> space", ...]
    (model and format fields where the point's model is not the entry's, the space's fixed
    values included), "params": the point's unique parameters (0 if not a valid model)}.
    `values` are the entry's `model.*`, `train.*` and `format.*` fields."""
    from arithsweep.core.errors import ConfigError
    from arithsweep.search.trials.configs import CONST_KEY, build_trial

    walk = _EntryTrial(values)
    config = RayDefineByRun(space)(walk)
    differs: list[str] = []
    try:
        setup = build_trial({**config, CONST_KEY: {"task": task, "target": 0.5}})
    except (ConfigError, TypeError, ValueError):
        setup = None
    if setup is not None:
        built = {**{f"model.{k}": v for k, v in setup.model_cfg.to_dict().items()
                    if k not in ("vocab_size", "n_ctx")},
                 **{f"format.{k}": v for k, v in vars(setup.task.fmt).items()}}
        # a width left to its default (None) is the same model as that width written out
        cfg = setup.model_cfg
        for key, width in (("d_head", cfg.qk_head), ("d_vhead", cfg.v_head),
                           ("n_kv_heads", cfg.kv_heads)):
            if values.get(f"model.{key}") is not None:
                built[f"model.{key}"] = width
        for key, mine in built.items():
            theirs = values.get(key, _NONE)
            if theirs is not _NONE and not _same(_plain(theirs), _plain(mine)):
                differs.append(f"{key} {fmt_value(theirs)} -> {fmt_value(mine)}")
    return {"point": walk.point, "unmapped": walk.unmapped, "differs": differs,
            "params": setup.params if setup is not None else 0}


def _plain(v: Any) -> Any:
    """Tuples and lists compare alike (JSON gives lists, configs may hold tuples)."""
    return [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v


class Descending:
    """The searcher's shrink moves: queued into its Optuna study once per new incumbent."""

    def _descend(self, state: Any) -> None:
        """Enqueue the shrink moves of each new verified incumbent: the next proposals are the
        incumbent one step smaller, with its training recipe. A board entry the search started
        from (--from-entry) is no Optuna trial: its item carries its point in the space
        ("point", map_entry). `state`: the running search's run_settings.DriverState."""
        space = getattr(self._space, "space", None)
        if (state is None or state.incumbent is None or state.frontier or space is None
                or getattr(self, "_descended", None) == state.incumbent):
            return
        self._descended = state.incumbent
        best = [v for v in state.verified.values()
                if v.get("qualifies") and int(v.get("params", 0)) == state.incumbent]
        point = (best[0].get("point") or self._optuna_params(str(best[0]["trial_id"]))
                 if best else None)
        bound = state.bound()  # --max-params under the incumbent: the moves clear it
        below = int(bound) if bound < state.incumbent else None
        moves = shrink_moves(space, point, self._sizer, below=below) if point else []
        behind = self._withdraw_older_moves(state.incumbent) if moves else []
        for move in moves:
            self._ot_study.enqueue_trial(move, user_attrs={MOVE_OF: state.incumbent},
                                         skip_if_exists=True)
        for params, attrs in behind:
            self._ot_study.enqueue_trial(params, user_attrs=attrs)
        log.info("search %s: incumbent %s p; queued its shrink moves%s", self._name,
                 state.incumbent, f", {len(behind)} of a larger one's behind them"
                 if behind else "")

    def _withdraw_older_moves(self, incumbent: int) -> list[tuple[dict, dict]]:
        """The still-queued shrink moves of an earlier, larger incumbent, withdrawn (FAIL with a
        note) to be queued again behind the new incumbent's: Optuna pops its queue first in,
        first out, and a search that verified the 36 from the 42 spent its last minutes on
        the 42's move to a 32-p d 2 shape before any move of the 36 (studies/search-s36).
        Returns each one's (params, user attrs) to enqueue again."""
        import optuna

        out = []
        for t in self._ot_study.get_trials(deepcopy=False,
                                           states=(optuna.trial.TrialState.WAITING,)):
            if t.user_attrs.get(MOVE_OF, incumbent) == incumbent:
                continue  # a start point, a replay, or this incumbent's own move
            storage = self._ot_study._storage  # as report.results.retire_waiting: no public API
            storage.set_trial_system_attr(t._trial_id, "arithsweep.note",
                                          f"queued again behind the moves of {incumbent} p")
            storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
            out.append((dict(t.system_attrs.get("fixed_params", t.params)), dict(t.user_attrs)))
        return out

    def _optuna_params(self, proposal_id: str) -> dict | None:
        """The Optuna params of a proposal (a Tune trial id, or `<id>.p<j>` in a pack)."""
        tune_id, _, j = proposal_id.partition(".p")
        for t in self._ot_study.get_trials(deepcopy=False):
            if t.user_attrs.get("tune_trial_id") == tune_id and (
                    not j or t.user_attrs.get("pack_index") == int(j)):
                return dict(t.params)
        return None
