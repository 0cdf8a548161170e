"""Search commands: `search`, `spaces`, `ui`.

    arithsweep search --task add3 --target 0.99 --trials 12
    arithsweep search --from-entry 44 --time-budget 2h     # continue from the board's entry 44
    arithsweep search --task add3 --fresh                  # from the space's start, not the board
    arithsweep spaces
    arithsweep ui
"""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
from pathlib import Path

import typer

from arithsweep.cli.common import (
    DB_HELP,
    TASK_HELP,
    check_outputs,
    out,
    print_json,
    stdout_to_stderr,
    table,
)
from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ArithsweepError
from arithsweep.core.evaluation.stats import percent
from arithsweep.search.options import DEFAULT_TRIALS, GPU_PROPOSALS, SearchOptions

_PART = r"(\d+(?:\.\d+)?)\s*([smhd])"
# a plain number of seconds, or parts with units, largest first as people write them: 2h15m
_DURATION = re.compile(rf"^\s*(?:\d+(?:\.\d+)?|(?:{_PART}\s*)+)\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | None, flag: str) -> float:
    """'90' / '90s' / '30m' / '2h' / '2h15m' -> seconds; None or '0' -> 0 (no budget)."""
    if not text:
        return 0.0
    if not _DURATION.match(text):
        raise ArithsweepError(f"{flag} {text!r}: expected a duration such as 90s, 30m, 2h "
                              f"or 2h15m")
    parts = re.findall(_PART, text)
    if not parts:
        return float(text)
    units = [u for _, u in parts]
    if len(set(units)) < len(units) or units != sorted(units, key=_UNIT.__getitem__,
                                                       reverse=True):
        raise ArithsweepError(f"{flag} {text!r}: each unit once, largest first (e.g. 2h15m)")
    return sum(float(x) * _UNIT[u] for x, u in parts)


def _live_view():
    """A Rich live view of the search (a header line over a table of proposals), fed by the
    driver's events; None when piped."""
    if not sys.stdout.isatty():
        return None, None
    from rich.live import Live

    from arithsweep.cli.render import LiveSearch

    view = LiveSearch()  # drawn afresh at each refresh: its clock moves between events
    return Live(view, console=out, refresh_per_second=2, transient=False), view.update


def search(
    task: str = typer.Option(None, "--task", "-t", help=TASK_HELP),
    target: float = typer.Option(None, "--target", help=f"exact match a trial must reach (default {TrainConfig.target:g})"),
    space: str = typer.Option(SearchOptions.space, "--space", "-s", help="shipped space name (see `arithsweep spaces`) or a YAML path (default: sort for sort, quirke for sub/mix up to 3 digits, quirke6 from 4, mul for mul1-mul2, mul3 for mul3 and up, microadder for add3-add9, tbukic for add10, adderboard for add11 and up, else tiny)"),
    trials: int = typer.Option(SearchOptions.trials, "--trials", "-n", help=f"trials in all, the earlier runs' included on --resume (default: none under a --time-budget, which ends the search, else {DEFAULT_TRIALS}; a resume keeps the cap it had); the first lines say the cap"),
    concurrency: int = typer.Option(None, "--concurrency", "-j", help="trials at once (default: as resources allow)"),
    cpus_per_trial: float = typer.Option(SearchOptions.cpus_per_trial, "--cpus-per-trial", help="CPUs per trial (fractions allowed)"),
    spare_cores: bool = typer.Option(SearchOptions.spare_cores, "--spare-cores/--no-spare-cores", help="a trial running alone takes the idle cores, and gives them back when another waits"),
    gpus_per_trial: float = typer.Option(None, "--gpus-per-trial", help="GPUs per trial, e.g. 0.25 (default 1 if the cluster has GPUs)"),
    proposals_per_trial: int = typer.Option(None, "--proposals-per-trial", help=f"Optuna proposals of one shape trained together per trial (default 1 on CPU; {GPU_PROPOSALS} when each trial gets a whole GPU)"),
    time_budget: str = typer.Option(None, "--time-budget", help="wall time for the whole search, e.g. 30m or 2h15m (default and 0: no limit)"),
    trial_time: str = typer.Option(None, "--trial-time", help="wall time per trial, e.g. 90s (default and 0: the space's)"),
    trial_steps: int = typer.Option(SearchOptions.trial_steps, "--trial-steps", help="training steps per trial (default: the space's)", show_default=False),
    address: str = typer.Option(None, "--address", help="join a Ray cluster (HOST:PORT or auto); default: a local instance"),
    name: str = typer.Option(None, "--name", help="search name (default <task>-<time>)"),
    resume: str = typer.Option(None, "--resume", help="continue the search with this name"),
    root: Path = typer.Option(None, "--root", help="where searches live (default ./searches)"),
    mlflow_uri: str = typer.Option(None, "--mlflow-uri", help="MLflow tracking URI (default sqlite:///<root>/mlflow.db)"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    n_verify: int = typer.Option(SearchOptions.n_verify, "--verify", help="best feasible trials the deadline cut off to verify at the end"),
    max_params: int = typer.Option(None, "--max-params", help="never train a model with more unique parameters"),
    frontier: bool = typer.Option(SearchOptions.frontier, "--frontier", help="train every size (params/accuracy trade-off): the incumbent does not bound proposals"),
    patience: int = typer.Option(SearchOptions.patience, "--patience", help="evaluations without progress before a trial stops"),
    rounds: int = typer.Option(1 + SearchOptions.extra_rounds, "--rounds", help=f"rounds per architecture: a near miss (best within {SearchOptions.near_miss:g} of the target) earns another, its best seed for twice the steps"),
    seed: int = typer.Option(SearchOptions.seed, "--seed", help="sampler seed and base training seed"),
    from_entry: str = typer.Option(None, "--from-entry", help="start from this leaderboard entry (id or sha256 prefix, local database then leaderboard/entries.json) or checkpoint folder (verified first) as the verified incumbent, descending from it; --task defaults to its task"),
    max_failures: int = typer.Option(SearchOptions.max_failures, "--max-failures", help="restarts of a trial whose process dies (out of memory, a lost node), each from its last saved state; then it ends errored and the search goes on"),
    fresh: bool = typer.Option(SearchOptions.fresh, "--fresh", help="start from the space's start point; without it (and without --from-entry) a new search starts from the board's smallest entry of the task at the target, as --from-entry would"),
    restart_unfinished: bool = typer.Option(SearchOptions.restart_unfinished, "--restart-unfinished", help="with --resume, continue a search started under another arithmetic version: its finished trials stand, its unfinished ones train again from step 0"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Ray Tune + Optuna search for the fewest-parameter model reaching the target.

    A new search starts from the board's smallest entry of the task (the local database and
    leaderboard/entries.json) as its verified incumbent (--fresh: from the space's start
    point); its first lines say where it starts, the space it searches below that bound with
    the space's smallest point, and its trial cap, and a space with nothing below the start
    stops there. Trials that reach the target are verified at once; no proposal as large as
    the smallest verified model is trained after that."""
    check_outputs(dirs={"--root": root or "searches"}, urls={"--db": db, "--mlflow-uri": mlflow_uri})
    opts = SearchOptions(
        task=task, target=target, space=space, trials=trials, concurrency=concurrency,
        cpus_per_trial=cpus_per_trial, spare_cores=spare_cores, gpus_per_trial=gpus_per_trial,
        proposals_per_trial=proposals_per_trial,
        time_budget=parse_duration(time_budget, "--time-budget"),
        trial_time_budget=parse_duration(trial_time, "--trial-time"), trial_steps=trial_steps,
        address=address, name=name, resume=resume,
        root=str(root.absolute()) if root else None, mlflow_uri=mlflow_uri,
        n_verify=n_verify, seed=seed, max_params=max_params, frontier=frontier,
        patience=patience, extra_rounds=max(0, rounds - 1), from_entry=from_entry, fresh=fresh,
        max_failures=max_failures, restart_unfinished=restart_unfinished,
        command=shlex.join(["arithsweep", *sys.argv[1:]]),
    )
    from arithsweep.leaderboard.entry_lookup import entry_finder, smallest_finder
    from arithsweep.leaderboard.verify import make_verifier
    from arithsweep.search.driver import run_search

    live, on_update = (None, None) if as_json else _live_view()
    if live is not None:
        live.start()
    try:
        # --json: stdout carries the JSON object alone, whatever Ray prints while it runs
        with stdout_to_stderr() if as_json else contextlib.nullcontext():
            summary = run_search(opts, on_update=on_update, verifier=make_verifier(db),
                                 find_entry=entry_finder(db, root or "searches"),
                                 find_smallest=smallest_finder(db, root or "searches"),
                                 note=lambda line: print(line, file=sys.stderr))
    finally:
        if live is not None:
            live.stop()
    res = summary.to_dict()
    if as_json:
        return print_json(res)
    _print_summary(summary)


def _print_summary(s) -> None:
    if s.from_entry:  # the entry it continued from, and how it mapped onto the space
        out.print(f"started {s.from_entry.get('note')}", markup=False)
    t = table(f"search {s.name} · {s.task} · target {s.target:g} · trials by size",
              ("trial", "params", "best exact match", "seeds ok", "stopped because", "verified",
               "entry", "architecture"))
    verified = {str(v.get("trial_id")): v for v in s.verified}
    for r in sorted(s.trials, key=lambda r: (r.get("params") or 0, str(r["trial_id"]))):
        v = verified.get(str(r["trial_id"]), {})
        vem = v.get("exact_match")
        ok = f"{r['seeds_reached']}/{r['seeds_trained']}" if r.get("seeds_trained") else "-"
        t.add_row(str(r["trial_id"]), str(r.get("params") or "-"), f"{r['best_em']:.4f}", ok,
                  str(r.get("stop_reason") or ""),
                  f"{vem:.6f}" if isinstance(vem, float) else "-", str(v.get("entry_id") or "-"),
                  str(r.get("architecture") or ""))
    out.print(t)
    if s.replayed:
        out.print(f"trained again first, from their own seeds: {', '.join(s.replayed)} (near "
                  f"misses the previous run's deadline cut)")
    if s.cut_near_misses:
        cut = ", ".join(f"{c['trial_id']} ({c['params']} p at {c['best_em']:.4f})"
                        for c in s.cut_near_misses)
        out.print(f"[yellow]cut by the deadline near the target[/]: {cut}; `arithsweep search "
                  f"--resume {s.name} --time-budget ...` trains them again first")
    above = ", ".join(s.trained_above_incumbent) or "none"
    total = (f" ({s.total_wall_time:.0f}s in all its runs)"
             if s.total_wall_time > s.wall_time + 0.5 else "")
    packed = (f" in {s.n_tune_trials} Tune trials of up to {s.largest_pack}"
              if s.largest_pack > 1 else "")
    out.print(f"{s.n_trials} proposals trained{packed} ({s.n_feasible} reached the target, "
              f"{s.n_errored} errored), {len(s.skipped)} proposals skipped untrained at or "
              f"above the incumbent, in {s.wall_time:.0f}s{total}; trained at or above an "
              f"existing incumbent: {above}")
    if s.cpu_hours:
        out.print(f"{s.cpu_hours:.2f} CPU-hours of trials: "
                  f"{s.n_trials / s.cpu_hours:.1f} proposals trained per CPU-hour")
    if s.best:
        b, ver = s.best, s.best.get("verified_em")
        # rounded down (percent), so a model with failures never reads "verified 1.0000"
        em = f"verified {percent(ver)}" if ver is not None else "not verified"
        out.print(f"best: [bold]{b.get('params')}[/] parameters, {em} (trial "
                  f"{b.get('trial_id')}, {b.get('exact_match'):.4f} held-out while training, "
                  f"leaderboard entry {b.get('entry_id') or '-'})")
    else:
        out.print("[yellow]no trial reached the target[/]: try more --trials, a bigger space "
                  "or a longer --trial-steps")
    if s.plot:  # none when no proposal trained
        out.print(f"plot {s.plot}")
    out.print(f"MLflow {s.mlflow_uri} (arithsweep ui) · Optuna study "
              f"{s.study_name} (arithsweep ui --optuna {s.study_name}) · results {s.dir}")


def spaces(as_json: bool = typer.Option(False, "--json")) -> None:
    """The shipped search spaces and their dimensions."""
    from arithsweep.search.space.spaces import list_spaces

    items = list_spaces()
    if as_json:
        return print_json([{"name": s.name, "description": s.description, "path": str(s.path),
                       "dimensions": s.dimensions, "seed_rule": s.seed_rule_line,
                       "size_rules": s.size_rule_lines}
                      for s in items])
    for s in items:
        out.print(f"[bold]{s.name}[/]  {s.description}  [dim]{s.path}[/]")
        for d in [*s.dimensions, *s.size_rule_lines]:
            out.print(f"    {d}")


def ui(
    root: Path = typer.Option(None, "--root", help="where searches live (default ./searches)"),
    mlflow_uri: str = typer.Option(None, "--mlflow-uri", help="tracking URI (default sqlite:///<root>/mlflow.db)"),
    optuna: str = typer.Option(None, "--optuna", help="serve optuna-dashboard on this search's study instead"),
    port: int = typer.Option(None, "--port", help="default 5000 (MLflow) or 8080 (Optuna)"),
) -> None:
    """Start the MLflow UI (or, with --optuna NAME, optuna-dashboard) on 127.0.0.1."""
    base = (root or Path("searches")).expanduser().absolute()
    if optuna is not None:
        db = base / optuna / "optuna.db"
        if not db.is_file():
            raise ArithsweepError(f"no Optuna study for search {optuna!r}: {db} does not exist")
        port = port or 8080
        serve = ("import sys; from optuna_dashboard import run_server; "
                 "run_server(sys.argv[1], host='127.0.0.1', port=int(sys.argv[2]))")
        cmd = [sys.executable, "-c", serve, f"sqlite:///{db}", str(port)]
        what = f"optuna-dashboard on http://127.0.0.1:{port} for study {optuna}"
    else:
        uri = mlflow_uri or f"sqlite:///{base / 'mlflow.db'}"
        if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
            raise ArithsweepError(f"no MLflow database at {uri.removeprefix('sqlite:///')}: "
                                  "run `arithsweep search` first or pass --mlflow-uri")
        port = port or 5000
        cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
               "--host", "127.0.0.1", "--port", str(port)]
        what = f"MLflow UI on http://127.0.0.1:{port} for {uri}"
        from arithsweep.cli.serve import check_port

        check_port(port)  # before reading the store: a taken port is the one thing to say
        pages = _runs_pages(uri)
    from arithsweep.cli.serve import serve_until_stopped

    raise SystemExit(serve_until_stopped(cmd, port, what, pages if optuna is None else []))


def _runs_pages(uri: str) -> list[str]:
    """URL fragments of each arithsweep experiment's run table: MLflow 3's UI may open an
    experiment on its GenAI overview whatever the experiment says, so `ui` prints the links
    that land on the trial runs."""
    try:
        from mlflow import MlflowClient

        exps = MlflowClient(tracking_uri=uri).search_experiments(
            filter_string="name LIKE 'arithsweep-%'")
    except Exception:  # an unreadable store: the server will say so itself
        return []
    return [f"#/experiments/{e.experiment_id}/runs  ({e.name})" for e in exps]
