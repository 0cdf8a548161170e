"""Search commands: `search`, `spaces`, `ui`.

    arithsweep search --task add3 --target 0.99 --trials 12
    arithsweep spaces
    arithsweep ui
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import typer

from arithsweep.cli.common import DB_HELP, TASK_HELP, err, out, print_json
from arithsweep.core.errors import ArithsweepError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | None, flag: str) -> float:
    """'90' / '90s' / '30m' / '2h' -> seconds; None or '0' -> 0 (no budget)."""
    if not text:
        return 0.0
    m = _DURATION.match(text)
    if not m:
        raise ArithsweepError(f"{flag} {text!r}: expected a duration such as 90s, 30m or 2h")
    return float(m.group(1)) * _UNIT[m.group(2)]


def _live_view():
    """A Rich live table of trials, fed by the driver's trial events; None when piped."""
    if not sys.stdout.isatty():
        return None, None
    from rich.live import Live
    from rich.table import Table

    trials: dict[str, dict] = {}

    def render() -> Table:
        t = Table(title="trials")
        for c in ("trial", "status", "params", "best exact match", "step", "architecture"):
            t.add_column(c)
        for tid, r in sorted(trials.items())[-30:]:
            em = r.get("best_em")
            t.add_row(tid, str(r.get("status", "")), str(r.get("params", "")),
                      f"{em:.4f}" if isinstance(em, float) else "", str(r.get("step", "")),
                      str(r.get("architecture", "")))
        return t

    live = Live(render(), console=out, refresh_per_second=2, transient=False)

    def on_update(event: dict) -> None:
        tid = str(event.get("trial_id", "?"))
        trials.setdefault(tid, {}).update({k: v for k, v in event.items() if v is not None})
        live.update(render())

    return live, on_update


def search(
    task: str = typer.Option(None, "--task", "-t", help=TASK_HELP),
    target: float = typer.Option(None, "--target", help="exact match a trial must reach (default 0.99)"),
    space: str = typer.Option("tiny", "--space", "-s", help="shipped space name (see `arithsweep spaces`) or a YAML path"),
    trials: int = typer.Option(20, "--trials", "-n", help="trials in total (on --resume: the new total)"),
    concurrency: int = typer.Option(None, "--concurrency", "-j", help="trials at once (default: as resources allow)"),
    cpus_per_trial: float = typer.Option(1.0, "--cpus-per-trial", help="CPUs per trial (fractions allowed)"),
    gpus_per_trial: float = typer.Option(None, "--gpus-per-trial", help="GPUs per trial, e.g. 0.25 (default 1 if the cluster has GPUs)"),
    time_budget: str = typer.Option(None, "--time-budget", help="wall time for the whole search, e.g. 30m"),
    trial_time: str = typer.Option(None, "--trial-time", help="wall time per trial, e.g. 90s (default: the space's)"),
    trial_steps: int = typer.Option(0, "--trial-steps", help="training steps per trial (default: the space's)"),
    address: str = typer.Option(None, "--address", help="join a Ray cluster (HOST:PORT or auto); default: a local instance"),
    name: str = typer.Option(None, "--name", help="search name (default <task>-<time>)"),
    resume: str = typer.Option(None, "--resume", help="continue the search with this name"),
    root: Path = typer.Option(None, "--root", help="where searches live (default ./searches)"),
    mlflow_uri: str = typer.Option(None, "--mlflow-uri", help="MLflow tracking URI (default sqlite:///<root>/mlflow.db)"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    n_verify: int = typer.Option(3, "--verify", help="best feasible trials to verify and record at the end"),
    seed: int = typer.Option(0, "--seed", help="sampler seed and base training seed"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Ray Tune + Optuna search for the fewest-parameter model reaching the target."""
    from arithsweep.search.driver import SearchOptions

    opts = SearchOptions(
        task=task, target=target, space=space, trials=trials, concurrency=concurrency,
        cpus_per_trial=cpus_per_trial, gpus_per_trial=gpus_per_trial,
        time_budget=parse_duration(time_budget, "--time-budget"),
        trial_time_budget=parse_duration(trial_time, "--trial-time"), trial_steps=trial_steps,
        address=address, name=name, resume=resume,
        root=str(root.absolute()) if root else None, mlflow_uri=mlflow_uri,
        n_verify=n_verify, seed=seed,
    )
    from arithsweep.leaderboard.verify import make_verifier
    from arithsweep.search.driver import run_search

    live, on_update = (None, None) if as_json else _live_view()
    if live is not None:
        live.start()
    try:
        summary = run_search(opts, on_update=on_update, verifier=make_verifier(db))
    finally:
        if live is not None:
            live.stop()
    res = summary.to_dict()
    if as_json:
        return print_json(res)
    _print_summary(summary)


def _print_summary(s) -> None:
    from rich.table import Table

    t = Table(title=f"search {s.name} · {s.task} · target {s.target:g}")
    for c in ("params", "exact match", "trial", "verified", "entry"):
        t.add_column(c)
    verified = {str(v.get("trial_id")): v for v in s.verified}
    for params, em in s.frontier:
        row = next((r for r in s.trials if r.get("params") == params
                    and r.get("best_em") == em), {})
        v = verified.get(str(row.get("trial_id")), {})
        vem = v.get("exact_match")
        t.add_row(str(params), f"{em:.4f}", str(row.get("trial_id", "")),
                  f"{vem:.6f}" if isinstance(vem, float) else "-", str(v.get("entry_id") or "-"))
    out.print(t)
    out.print(f"{s.n_trials} trials ({s.n_feasible} reached the target, {s.n_errored} errored) "
              f"in {s.wall_time:.0f}s; frontier above (params vs best exact match)")
    if s.best:
        out.print(f"best: [bold]{s.best.get('params')}[/] parameters, exact match "
                  f"{s.best.get('exact_match'):.4f} (trial {s.best.get('trial_id')}, "
                  f"leaderboard entry {s.best.get('entry_id') or '-'})")
    else:
        out.print("[yellow]no trial reached the target[/]: try more --trials, a bigger space "
                  "or a longer --trial-steps")
    out.print(f"plot {s.plot}\nMLflow {s.mlflow_uri} (arithsweep ui) · results {s.dir}")


def spaces(as_json: bool = typer.Option(False, "--json")) -> None:
    """The shipped search spaces and their dimensions."""
    from arithsweep.search.spaces import list_spaces

    items = list_spaces()
    if as_json:
        return print_json([{"name": s.name, "description": s.description, "path": str(s.path),
                       "dimensions": s.dimensions} for s in items])
    for s in items:
        out.print(f"[bold]{s.name}[/]  {s.description}  [dim]{s.path}[/]")
        for d in s.dimensions:
            out.print(f"    {d}")


def ui(
    root: Path = typer.Option(None, "--root", help="where searches live (default ./searches)"),
    mlflow_uri: str = typer.Option(None, "--mlflow-uri", help="tracking URI (default sqlite:///<root>/mlflow.db)"),
    port: int = typer.Option(5000, "--port"),
) -> None:
    """Start the MLflow UI on 127.0.0.1 for the searches' tracking database."""
    base = (root or Path("searches")).expanduser().absolute()
    uri = mlflow_uri or f"sqlite:///{base / 'mlflow.db'}"
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        raise ArithsweepError(f"no MLflow database at {uri.removeprefix('sqlite:///')}: "
                              "run `arithsweep search` first or pass --mlflow-uri")
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
           "--host", "127.0.0.1", "--port", str(port)]
    err.print(f"MLflow UI on http://127.0.0.1:{port} for {uri} (Ctrl-C stops it)")
    try:
        raise SystemExit(subprocess.call(cmd))
    except KeyboardInterrupt:
        raise SystemExit(0) from None
