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

    python -c "from arithsweep.search.shrink import *; from arithsweep.search.spaces import *; \\
        from arithsweep.search.trial import ProposalSizer; s = load_space('tiny'); \\
        print(shrink_moves(s, s.start[0], ProposalSizer({'task': 'add3'})))"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arithsweep.search.spaces import RayDefineByRun, Space

MOVES_PER_INCUMBENT = 3  # enqueued per new incumbent; TPE fills the other proposals


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
                 limit: int = MOVES_PER_INCUMBENT) -> list[dict[str, Any]]:
    """Up to `limit` points one step from `point` (searched keys -> values, as Optuna trial
    params), each strictly smaller by `sizer`: the smallest first, then evenly spread sizes
    up to the largest."""
    base = _full_config(space, point)
    size = sizer(base) if base is not None else 0
    if not size:
        return []
    found: dict[tuple, tuple[int, dict[str, Any]]] = {}
    for key, value in point.items():
        if not key.startswith("model.") or key not in {p.name for p in space.searched}:
            continue
        for new in _neighbour_values(space, key, value):
            moved = _reachable(space, {**point, key: new})
            config = _full_config(space, moved)
            n = sizer(config) if config is not None else 0
            if 0 < n < size:
                found.setdefault(tuple(sorted(moved.items(), key=str)), (n, moved))
    ranked = [moved for _, moved in sorted(found.values(), key=lambda x: x[0])]
    if len(ranked) <= limit:
        return ranked
    # the boldest move first (it saves the most if it trains), then an even spread up to
    # the gentlest, so one failed bold step does not leave the search with nothing nearby
    picks = sorted({round(i * (len(ranked) - 1) / (limit - 1)) for i in range(limit)})
    return [ranked[i] for i in picks]
