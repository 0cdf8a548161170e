"""Shrink moves: one searched model key changed, always smaller, recipe kept."""

from __future__ import annotations

from arithsweep.search.propose.shrink import _full_config, shrink_moves
from arithsweep.search.space.spaces import load_space, parse_space
from arithsweep.search.trials.configs import ProposalSizer

SPACE = """
name: t
description: test
model:
  n_layers: 1
  d_model: {int: [3, 8]}
  n_heads: 1
  d_ff: {choice: [0, 4, 8, 12]}
  activation: {choice: [relu, gelu], when: {d_ff: {gt: 0}}}
  tie_kv: {choice: [false, true]}
train:
  lr: {float: [1.0e-3, 1.0e-2], log: true}
"""


def _size(space, sizer, point):
    return sizer(_full_config(space, point))


def test_every_move_changes_one_model_key_and_is_smaller():
    space, sizer = parse_space(SPACE), ProposalSizer({"task": "add3"})
    point = {"model.d_model": 6, "model.d_ff": 8, "model.activation": "gelu",
             "model.tie_kv": False, "train.lr": 0.004}
    moves = shrink_moves(space, point, sizer, limit=10)
    base = _size(space, sizer, point)
    assert moves
    for m in moves:
        changed = {k for k in point if m[k] != point[k]}
        assert len(changed) == 1 and changed.pop().startswith("model.")
        assert m["train.lr"] == 0.004  # the recipe that worked is kept
        assert 0 < _size(space, sizer, m) < base
    changed_to = {(k, m[k]) for m in moves for k in point if m[k] != point[k]}
    # one rung down each ladder, never a jump to the bottom; d_ff 0 would drop activation
    assert changed_to == {("model.d_model", 5), ("model.d_ff", 4), ("model.tie_kv", True)}


def test_limit_keeps_the_boldest_first_then_a_spread():
    space, sizer = load_space("tiny"), ProposalSizer({"task": "add3"})
    point = space.start[0]
    every = shrink_moves(space, point, sizer, limit=100)
    picked = shrink_moves(space, point, sizer, limit=3)
    sizes = [_size(space, sizer, m) for m in picked]
    all_sizes = sorted(_size(space, sizer, m) for m in every)
    assert len(picked) == 3 and sizes == sorted(sizes)
    assert sizes[0] == all_sizes[0] and sizes[-1] == all_sizes[-1]


def test_nothing_smaller_gives_no_moves():
    space, sizer = parse_space(SPACE), ProposalSizer({"task": "add3"})
    point = {"model.d_model": 3, "model.d_ff": 0, "model.tie_kv": True, "train.lr": 0.004}
    assert shrink_moves(space, point, sizer) == []


def test_a_structural_move_drops_the_keys_it_switches_off():
    """Dropping the MLP (d_ff 4 -> 0) or tying O to Q^T switches off keys that only apply
    with the old value (activation, rank_o): the move is a valid, smaller structure, and the
    keys it switched off leave the point."""
    space, sizer = parse_space(SPACE), ProposalSizer({"task": "add3"})
    point = {"model.d_model": 3, "model.d_ff": 4, "model.activation": "relu",
             "model.tie_kv": True, "train.lr": 0.004}
    (move,) = shrink_moves(space, point, sizer)
    assert move == {"model.d_model": 3, "model.d_ff": 0, "model.tie_kv": True, "train.lr": 0.004}
    assert 0 < _size(space, sizer, move) < _size(space, sizer, point)
    frontier, sizer10 = load_space("adderboard"), ProposalSizer({"task": "add10"})
    start = frontier.start[0]
    moves = shrink_moves(frontier, start, sizer10, limit=20)
    tied = next(m for m in moves if m["model.tie_o"])
    assert "model.rank_o" not in tied and _size(frontier, sizer10, tied) == 146 - 24
    assert {k for m in moves for k in m if m.get(k) != start.get(k)} >= {
        "model.embed", "model.tie_o", "model.n_heads", "model.share_norms", "model.qk_norm"}


def test_a_new_incumbent_makes_its_shrink_moves_the_next_proposals(tmp_path):
    """Real Optuna (SQLite): once a trial is the verified incumbent, the searcher's next
    proposals are that trial one step smaller, with its training recipe."""
    from arithsweep.search import run_settings
    from arithsweep.search.propose.searcher import ConstrainedOptunaSearch

    space, sizer = load_space("tiny"), ProposalSizer({"task": "add3"})
    search = ConstrainedOptunaSearch(
        space.ray_define_by_run(), target=0.99, study_name="descend",
        storage_url=f"sqlite:///{tmp_path / 'optuna.db'}", sizer=sizer, seed=0,
        start=space.start)
    state = run_settings.register("descend", run_settings.DriverState(trials=10, deadline=None))
    try:
        first = search.suggest("t1")  # the space's start point
        assert sizer(first) == 278
        state.verified["t1"] = {"trial_id": "t1", "qualifies": True, "params": 278}
        state.incumbent = 278
        expected = shrink_moves(space, search._optuna_params("t1"), sizer)
        nxt = [search.suggest(f"t{i}") for i in (2, 3, 4)]
        assert [sizer(c) for c in nxt] == [sizer(_full_config(space, m)) for m in expected]
        for c in nxt:
            assert sizer(c) < 278 and c["train.lr"] == first["train.lr"]
    finally:
        run_settings.unregister("descend")


def test_under_a_bound_the_moves_are_the_nearest_points_below_it():
    """`--max-params` under the incumbent: few one-step moves clear it, so the moves are the
    points under it nearest to the incumbent: one key changed before two, the largest first.
    From the 42 p a search below the 36 starts from (entry 59), today's moves without the
    bound led with a 32-p d 2 and queued a 41 p the bound then skipped."""
    space, sizer = load_space("tbukic"), ProposalSizer({"task": "add10"})
    the_42 = {"model.d_model": 3, "model.d_ff": 2, "model.activation": "swiglu",
              "model.norm_weight": "scalar", "model.qk_norm": "head", "model.embed": "arc",
              "model.tie_k": "q", "model.mlp_down": "own", "model.tie_gate": False}
    assert _size(space, sizer, the_42) == 42
    moves = shrink_moves(space, the_42, sizer, limit=40, below=37)
    # (a key a move switches off, tie_gate under ReLU, is no change of its own)
    changed = [sum(k in m and m[k] != v for k, v in the_42.items()) for m in moves]
    sizes = [_size(space, sizer, m) for m in moves]
    assert all(n < 37 for n in sizes) and changed == sorted(changed)
    assert changed[0] == 1 and 2 in changed  # two keys where one cannot clear the bound
    ones = [n for n, c in zip(sizes, changed) if c == 1]
    assert ones == sorted(ones, reverse=True) and ones[0] == 36
    picked = shrink_moves(space, the_42, sizer, below=37)
    assert [_size(space, sizer, m) for m in picked] == sizes[:3] == [36, 36, 35]
    # without a bound under the incumbent: as before, the boldest first, then a spread
    assert shrink_moves(space, the_42, sizer, below=42) == shrink_moves(space, the_42, sizer)


def test_a_new_incumbents_moves_go_before_a_larger_ones_still_queued():
    """Optuna pops its queue first in, first out: a smaller incumbent's moves are queued, and a
    larger one's still waiting are queued again behind them (withdrawn copies FAIL, noted)."""
    from types import SimpleNamespace

    import optuna

    from arithsweep.search.propose.shrink import MOVE_OF, Descending

    space, sizer = parse_space(SPACE), ProposalSizer({"task": "add3"})
    big = {"model.d_model": 8, "model.d_ff": 12, "model.activation": "relu",
           "model.tie_kv": False, "train.lr": 0.004}
    small = {**big, "model.d_model": 6, "model.d_ff": 8}
    sizes = {int(_size(space, sizer, p)): p for p in (big, small)}

    class Searcher(Descending):
        def __init__(self):
            self._space, self._sizer, self._name = SimpleNamespace(space=space), sizer, "t"
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            self._ot_study = optuna.create_study()

    def state(size):
        return SimpleNamespace(incumbent=size, frontier=False, bound=lambda: float("inf"),
                               verified={"v": {"qualifies": True, "params": size,
                                               "point": sizes[size], "trial_id": "x"}})

    s = Searcher()
    large, smaller = max(sizes), min(sizes)
    s._descend(state(large))
    old = [t.params or t.system_attrs["fixed_params"] for t in s._ot_study.trials]
    s._ot_study.ask()  # one of the larger incumbent's moves runs; the others wait
    s._descend(state(smaller))
    waiting = s._ot_study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    owners = [t.user_attrs[MOVE_OF] for t in waiting]
    assert owners[0] == smaller and large in owners  # the new moves first, the old behind
    assert owners == sorted(owners)
    assert sorted(map(str, (t.system_attrs["fixed_params"] for t in waiting
                            if t.user_attrs[MOVE_OF] == large))) == sorted(map(str, old[1:]))
    withdrawn = s._ot_study.get_trials(states=(optuna.trial.TrialState.FAIL,))
    assert len(withdrawn) == len(old) - 1 and all(
        "behind the moves" in t.system_attrs["arithsweep.note"] for t in withdrawn)
    assert s._ot_study.ask().user_attrs[MOVE_OF] == smaller
