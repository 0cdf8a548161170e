"""The live view of `arithsweep search` at 80 columns: one header line saying where the search
stands (time of its budget, the verified incumbent, proposals trained / skipped / running,
proposals per CPU-hour) over a table whose every row is one line. Fed with the events the
driver sends (arithsweep.search.report.live, arithsweep.search.driver), without starting Ray."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from arithsweep.cli.render import LiveSearch, proposal_counts, search_header, short_architecture

T0 = 1_700_000_000.0
LONG = ("1L d5 h1 dh5 dv5 ff2 gelu rms tied digit_index k=rot(q) split-pos v<-tok r:o1 emb-arc "
        "de2 qk<-pos head v=headT places-learned")
FRONTIER = "1L d3 h1 dh4 dv4 ff2 swiglu rms tied rope qkn-head v=q o=qT emb-arc"


def _progress(**kw) -> dict:
    base = {"name": "add10-20250101-120000", "started": T0, "time_budget": 1200.0,
            "cpus_per_trial": 2.0, "skipped": 0, "incumbent": None}
    return {**base, **kw}


def _events() -> list[dict]:
    """A search twelve minutes in: two single proposals done (one verified, the incumbent),
    one errored, one skipped at the bound, a pack of 16 proposals of 64 seeds running."""
    ev: list[dict] = [{"event": "search", "trial_id": None, "search": _progress()}]
    driver = {"skipped": 0, "incumbent": None}  # what the driver's state holds meanwhile

    def add(**e):
        driver["skipped"] += e["status"] == "skipped"
        ev.append({**e, "search": _progress(**driver)})

    add(event="start", trial_id="3f9a0c12", status="running", params=244, seeds=8,
        architecture=FRONTIER, tune_trial_id="3f9a0c12")
    add(event="complete", trial_id="3f9a0c12", status="done", params=244, best_em=0.99612,
        step=48_000, seeds_reached=3, seeds_trained=8, time_total_s=540.0,
        stop_reason="reached target", architecture=FRONTIER, tune_trial_id="3f9a0c12")
    driver["incumbent"] = {"params": 244, "exact_match": 0.994113, "entry_id": 17,
                           "trial_id": "3f9a0c12"}
    add(event="verified", trial_id="3f9a0c12", status="verified", params=244, best_em=0.994113)
    add(event="complete", trial_id="b71e0d55", status="done", params=1_184, best_em=0.4312,
        step=120_000, seeds_reached=0, seeds_trained=16, time_total_s=900.0,
        architecture="2L d32 h4 ff64 relu ln tied abacus_bias x2 k=v", tune_trial_id="b71e0d55")
    add(event="error", trial_id="c0ffee01", status="error", params=310, seeds=8,
        architecture=LONG, tune_trial_id="c0ffee01", error="RuntimeError: NaN in every seed")
    add(event="skipped", trial_id="#41", status="skipped", params=251)
    for j in range(16):
        add(event="result", trial_id=f"9d2b7a40.p{j}", tune_trial_id="9d2b7a40",
            status="running", params=198, best_em=0.0132 * j, step=2_500, seeds=64,
            architecture=LONG, time_total_s=95.5)
    return ev


def _render(view: LiveSearch, width: int, height: int = 60) -> list[str]:
    console = Console(width=width, height=height, record=True, file=io.StringIO(),
                      color_system=None)
    console.print(view)
    return console.export_text().rstrip("\n").split("\n")


def _view() -> LiveSearch:
    view = LiveSearch(clock=lambda: T0 + 724)  # 12m04s in
    for e in _events():
        view.update(e)
    return view


def test_every_row_is_one_line_at_80_columns_and_the_header_says_where_the_search_stands():
    view = _view()
    lines = _render(view, 80)
    assert len(view.rows) == 20
    # the header, the table's head and its rule, then exactly one line per proposal
    assert len(lines) == 1 + 2 + len(view.rows), "\n".join(lines)
    assert all(len(line) <= 80 for line in lines)
    header = lines[0]
    # 3 trained (verified, done, errored), 1 skipped, 16 running (the pack's proposals);
    # 3 proposals / (2 CPUs x (540 + 900 s) + the errored trial's 0 s) = 3.75 per CPU-hour
    assert header == ("12m04s of 20m · best 244p 99.41% entry 17 · 3 trained 1 skip 16 run · "
                      "3.8/CPU-h")
    rows = {line.split()[0]: line for line in lines[3:]}
    assert set(rows) == set(view.rows)
    assert "verified" in rows["3f9a0c12"] and "3/8" in rows["3f9a0c12"]
    assert "120k" in rows["b71e0d55"] and "0/16" in rows["b71e0d55"]
    assert "skipped" in rows["#41"] and "251" in rows["#41"]
    # the long architecture is cut after a whole word, with an ellipsis
    assert rows["9d2b7a40.p15"].rstrip().endswith("…") and " 64 " in rows["9d2b7a40.p15"]
    assert "1L d5 h1 dh5 dv5 ff2" in rows["9d2b7a40.p15"]


def test_a_wider_terminal_shows_more_of_the_architecture():
    lines = _render(_view(), 200)
    assert len(lines) == 1 + 2 + 20
    assert any(line.rstrip().endswith(LONG) for line in lines)
    assert lines[0] == ("12m04s of 20m · incumbent 244 p, 99.4113% verified, entry 17 · "
                        "3 trained, 1 skipped, 16 running · 3.8 proposals/CPU-hour")


def test_only_the_latest_rows_fit_a_short_terminal_and_running_ones_stay():
    lines = _render(_view(), 80, height=12)
    shown = [line.split()[0] for line in lines[3:-1]]
    assert len(shown) == 7 and lines[-1].strip() == "13 earlier proposals not shown"
    assert all(s.startswith("9d2b7a40.p") for s in shown)  # all of them running
    assert all(len(line) <= 80 for line in lines)


def test_header_before_any_trial_without_budget_or_incumbent():
    assert search_header(_progress(time_budget=0.0), {}, T0 + 3725, 120) == (
        "1h02m05s, no budget · incumbent: none yet · 0 trained, 0 skipped, 0 running · "
        "- proposals/CPU-hour")
    assert search_header(_progress(time_budget=0.0), {}, T0 + 3725, 80) == (
        "1h02m05s, no budget · best: none yet · 0 trained 0 skipped 0 running · -/CPU-h")
    assert search_header(None, {}, T0, 80) == "starting the search…"
    for width in (40, 60, 80):  # parts turn short, then the line is cut: never wraps
        assert len(search_header(_progress(), _view().rows, T0 + 724, width)) <= width
    # hours in, hundreds of proposals, a six-nines incumbent: still one line of 80
    rows = {str(i): {"status": "done", "time_total_s": 60.0} for i in range(412)}
    rows.update({f"#{i}": {"status": "skipped"} for i in range(130)})
    rows.update({f"r{i}": {"status": "running"} for i in range(16)})
    inc = {"params": 1184, "exact_match": 0.999998, "entry_id": 1234}
    head = search_header(_progress(time_budget=7200.0, skipped=130, cpus_per_trial=1.0,
                                   incumbent=inc), rows, T0 + 4000, 80)
    assert head == ("1h06m40s/2h · best 1184p 99.99% e1234 · 412 trained 130 skip 16 run · "
                    "60/CPU-h")


def test_short_architecture_fits_and_never_cuts_inside_a_word():
    assert short_architecture(FRONTIER, 80) == FRONTIER
    for width in (10, 20, 31, 50):
        short = short_architecture(LONG, width)
        assert len(short) <= width and short.endswith("…")
        kept = short.removesuffix("…").split()
        full = short_architecture(LONG, 200).split()
        shorter = [{"digit_index": "digit-ix", "places-learned": "places-l"}.get(w, w)
                   for w in full]
        assert kept == shorter[:len(kept)]
    assert short_architecture("1L d7 h1 ff14 relu ln tied learned k=v", 37) == \
        "1L d7 h1 ff14 relu ln tied lpos k=v"


def test_counts_are_by_status():
    rows = {e["trial_id"]: e for e in ({"trial_id": "a", "status": "rejected"},
                                       {"trial_id": "b", "status": "running"},
                                       {"trial_id": "#3", "status": "skipped"})}
    assert proposal_counts(rows) == {"trained": 1, "skipped": 1, "running": 1}


def test_pack_events_carry_each_proposals_own_architecture_and_seeds():
    """A pack's Tune config is not one model: each proposal's row is built from its own."""
    from arithsweep.search.report.live import LiveCallback
    from arithsweep.search.trials.configs import CONST_KEY

    const = {"task": "add3", "target": 0.99}
    member = {"model.n_layers": 1, "model.d_model": 8, "model.n_heads": 1, "train.seeds": 4}
    trial = SimpleNamespace(trial_id="9d2b7a40", last_result={}, config={
        "proposals": [{**member, "trial_number": 3}, {**member, "trial_number": 4}],
        CONST_KEY: const})
    out = LiveCallback("not-registered")._each("start", "running", trial, {})
    assert [pid for pid, _ in out] == ["9d2b7a40.p0", "9d2b7a40.p1"]
    for _, e in out:
        assert e["architecture"].startswith("1L d8 h1 ") and e["seeds"] == 4
        assert e["tune_trial_id"] == "9d2b7a40" and e["params"] > 0


def test_driver_progress_names_the_smallest_verified_model():
    from arithsweep.search.driver import _progress
    from arithsweep.search.options import SearchOptions

    state = SimpleNamespace(skipped=[{}, {}], verified={
        "a": {"qualifies": True, "params": 300, "exact_match": 0.999, "entry_id": 4},
        "b": {"qualifies": False, "params": 200, "exact_match": 0.5},
        "c": {"qualifies": True, "params": 244, "exact_match": 0.9941, "entry_id": 17,
              "trial_id": "c"}})
    p = _progress("s", T0, SearchOptions(task="add3", time_budget=1200, cpus_per_trial=2), state)
    assert p["incumbent"] == {"params": 244, "exact_match": 0.9941, "entry_id": 17,
                              "trial_id": "c"}
    assert (p["started"], p["time_budget"], p["cpus_per_trial"], p["skipped"]) == (
        T0, 1200, 2, 2)
