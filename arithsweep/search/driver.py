"""The search driver: Ray Tune + Optuna find the smallest model that reaches the target.

Optuna (define-by-run from a YAML space) minimises unique parameters subject to best exact
match >= target (a constraint set on each Optuna trial when it completes). It is a minimiser,
not a generic tuner: a trial that reaches the target is verified from its weights on the
driver at once (through the caller's `verifier`), and from then on no proposal of that size
or larger is trained (told to Optuna untrained, shown as skipped) and running trials that are
no smaller are stopped. Trials stop on their own curve (plateau, budget, reached), never
because a bigger model is ahead; near misses earn a second round of seeds. Every trial is an
MLflow run; the summary lists stop reasons, skipped proposals and per-architecture success.
With `proposals_per_trial` P > 1 (the default on a GPU machine, see
`options.resources_per_trial`) each Tune trial is a pack of up to P proposals of one shape
trained as one population (`arithsweep.search.packs`); every proposal stays its own Optuna
trial, MLflow run, verification candidate and summary row.

    from arithsweep.search.driver import SearchOptions, run_search
    print(run_search(SearchOptions(task="add2", target=0.9, space="tiny", trials=8)).best)

or `arithsweep search --task add2 --target 0.9 --trials 8`. A search lives in
`<root>/<name>/`: `tune/` (the Tune experiment, trial checkpoints), `optuna.db` (the study,
named after the search), `search.json`, `summary.json`, `params_vs_em.png`. MLflow defaults to
`<root>/mlflow.db` with artifacts under `<root>/mlartifacts`. A killed search continues with
`SearchOptions(resume=name, trials=N)` (N: the new total; not given, the cap it had, see
`options.trial_cap`): same Tune experiment, same Optuna study, same
incumbent (`verified.json`). `SearchOptions(from_entry="44")` (`--from-entry`) starts from a
leaderboard entry or checkpoint folder as the verified incumbent, descending from its point
in the space (`incumbent.entry_incumbent`, `shrink.map_entry`); search.json keeps it under
"from_entry", with the commands of the searches that found it ("chain"), for `publish`.
Given `find_smallest` (the CLI gives it), a new search without from_entry starts so from the
board's smallest entry of its task at its target, unless `SearchOptions(fresh=True)`
(`--fresh`): then, as without an entry on the board, from the space's start point. Before
anything is written it says where it starts, what it searches below, its bound and its trial
cap (`plan.settle`), and a search whose space holds nothing below its start stops there.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from arithsweep import __version__
from arithsweep.core.arithmetic import ARITHMETIC, state_refused, version_of
from arithsweep.core.config import TrainConfig
from arithsweep.core.errors import ArithsweepError, ConfigError
from arithsweep.search import cluster, plan
from arithsweep.search.options import SearchOptions, SearchProgress, SearchSummary, moved

TUNE_DIR = "tune"  # the Tune experiment's name inside the search directory


# Bumped when what a search directory holds stops loading in a newer arithsweep (Tune pickles
# the trainable's and searcher's classes by module path; spaces gain fields): 2 = the frontier
# model family and list-valued train fields.
SEARCH_FORMAT = 2

def _abs_sqlite(path: Path) -> str:
    return f"sqlite:///{path.absolute()}"  # sqlite:////abs/path: workers' cwd never matters


def _abs_tracking_uri(uri: str | None) -> str | None:
    """Relative SQLite URIs and plain paths become absolute (else: one DB per working dir)."""
    if uri and uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return _abs_sqlite(Path(uri[len("sqlite:///"):]).expanduser())
    return str(Path(uri).expanduser().absolute()) if uri and "://" not in uri else uri


Verifier = Callable[[dict], dict]
"""Re-verifies one candidate from its weights and records it if it qualifies.

Gets {"trial_id", "params", "train_em", "checkpoint", "mlflow_run_id", "search_name", "target"};
returns at least {"qualifies": bool, "exact_match": float | None} and, when recorded,
"entry_id". The CLI builds one from the leaderboard wing (`leaderboard.verify.make_verifier`),
so the search never imports the leaderboard; None verifies nothing."""

EntryFinder = Callable[[str], dict]
"""Finds what `--from-entry REF` names: for a board entry (id or sha256 prefix) its row
(entry_id, task, format, params, exact_match, model_config, train_config, checkpoint,
search_name, seeds_reached, chain: the commands of the searches that found it); for a
checkpoint folder only {"checkpoint", "chain"} (the driver verifies it). Raises
ArithsweepError (one line) for anything else. The CLI builds it from the leaderboard wing
(`leaderboard.entry_lookup.entry_finder`)."""

BoardFinder = Callable[[str, float], "dict | None"]
"""Finds where a new search starts: `find_smallest(task, target)` gives the board's smallest
entry of the task at the target or above (the local database and the published entries.json
ranked as one; fewest params, then the best exact match) as `EntryFinder` gives an entry, or
None when the board holds none. Raises ArithsweepError when the board cannot be read. The CLI
builds it from the leaderboard wing (`leaderboard.entry_lookup.smallest_finder`)."""


@dataclass
class _Search:
    """What a search run is, settled before Ray starts; each step below gets it."""

    opts: SearchOptions
    t0: float  # when run_search began: the time budget counts from here
    root: Path
    name: str
    sdir: Path  # <root>/<name>
    task_name: str  # as given (search.json keeps it)
    task: Any  # core.data.tasks.Task: built once per search
    target: float
    space: Any  # spaces.Space
    stored: dict[str, Any]  # a resumed search's search.json ({} for a new one)
    start: dict | None  # the entry it starts from, its verified incumbent (None: none)
    unused: str | None  # why it starts from the space's start point, not a board entry (the note)
    mlflow_uri: str
    optuna_url: str
    fresh: bool = False  # its folder did not exist: removed again if Ray or MLflow fail
    trials: int | None = None  # Tune trials in all (options.trial_cap; None: no cap)
    lines: tuple[str, ...] = ()  # what it says before it starts (plan.settle)


def run_search(opts: SearchOptions, on_update: Callable[[dict], None] | None = None,
               verifier: Verifier | None = None, find_entry: EntryFinder | None = None,
               note: Callable[[str], None] | None = None,
               find_smallest: BoardFinder | None = None) -> SearchSummary:
    """Run (or resume) a search; `on_update(event)` gets trial start/result/complete events,
    each with the search's `SearchProgress` (as a dict) under "search", and one event
    "search" (trial_id None) before any trial;
    `verifier` checks trials that reach the target from their weights (see `Verifier`): the
    smallest verified one bounds every later proposal; `find_entry` looks `--from-entry` up
    (see `EntryFinder`); `find_smallest` the board's smallest entry of the task, where a new
    search without `from_entry` or `fresh` starts (see `BoardFinder`); `note(line)` gets,
    before the search starts, each line of what it will do (`plan.settle`): where it starts
    ("starting from entry ..." and how it mapped onto the space, "starting from the space's
    start point, not ..." when the board's entry cannot be used, "resuming search ..."),
    then the space it searches, below what bound, its smallest point and the trial cap."""
    s = _settle(opts, time.time(), verifier, find_entry, find_smallest)
    for line in s.lines if note is not None else ():
        note(line)
    _record(s)
    with cluster.quiet_logs():
        summary, before, parent_run = _run(s, on_update, verifier)
    return _close(s, summary, before, parent_run)


def _settle(opts: SearchOptions, t0: float, verifier: Verifier | None,
            find_entry: EntryFinder | None, find_smallest: BoardFinder | None) -> _Search:
    """Everything a search is before Ray starts and before any file is written: its name,
    task, target, space and the entry it starts from. Bad input fails here, in one line."""
    from arithsweep.core.data.tasks import get_task
    from arithsweep.search.space.spaces import default_space, load_space

    root = Path(opts.root or Path.cwd() / "searches").expanduser().absolute()
    given = opts.resume or opts.name
    # a folder resumed from another path (a clone) follows where it is now
    stored = moved(_stored_options(root / given, opts), str(root)) if given else {}
    bound = (stored.get("options") or {}).get("max_params")
    if opts.resume and opts.max_params is None and isinstance(bound, int):
        opts = replace(opts, max_params=bound)  # a resume keeps the bound it was started with
    # a new search without --target aims where one training run stops (TrainConfig.target)
    target = float(stored.get("target", opts.target if opts.target is not None
                              else TrainConfig.target))
    # an unknown task: one clear error before the board or an entry is looked up
    task = get_task(opts.task) if opts.task is not None else None
    start, values, unused = _starting_entry(opts, target, verifier, find_entry, find_smallest)
    task_name = stored.get("task", opts.task or (start or {}).get("task"))
    if task is None or task_name != opts.task:
        task = get_task(task_name)
    name = given or f"{task_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if not given:
        _stored_options(root / name, opts)  # the name must be free
    space = load_space(stored.get("space_path") or opts.space or default_space(task))
    if start is not None:
        from arithsweep.search.propose.incumbent import start_item
        from arithsweep.search.propose.shrink import map_entry

        start = start_item(start, map_entry(space, values, task_name), space.name)
    sdir = root / name
    trials, lines = plan.settle(opts, space, task_name, start, unused, stored, sdir)
    return _Search(
        opts=opts, t0=t0, root=root, name=name, sdir=sdir, task_name=task_name, task=task,
        target=target, space=space, stored=stored, start=start, unused=unused,
        mlflow_uri=(stored.get("mlflow_uri") or _abs_tracking_uri(opts.mlflow_uri)
                    or _abs_sqlite(root / "mlflow.db")),
        optuna_url=_abs_sqlite(sdir / "optuna.db"), fresh=not opts.resume and not sdir.exists(),
        trials=trials, lines=tuple(lines))


def _starting_entry(opts: SearchOptions, target: float, verifier: Verifier | None,
                    find_entry: EntryFinder | None, find_smallest: BoardFinder | None
                    ) -> tuple[dict | None, Any, str | None]:
    """The entry a new search starts from (--from-entry, else the board's smallest unless
    --fresh), verified; (entry, its values, why the board's entry is unused)."""
    if opts.from_entry:  # a new search only (SearchOptions says so)
        from arithsweep.search.propose.incumbent import entry_incumbent

        start, values = entry_incumbent(opts.from_entry, opts.task, target, find_entry,
                                        verifier)
        return start, values, None
    if find_smallest is not None and not opts.resume and not opts.fresh:
        from arithsweep.search.propose.incumbent import board_incumbent

        return board_incumbent(opts.task, target, find_smallest)
    return None, None, None


def _record(s: _Search) -> None:
    """search.json: a new search's settings (and its starting incumbent in verified.json), or
    one more resume of an old one, so a published entry can say how the search really ran."""
    opts, space, sdir = s.opts, s.space, s.sdir
    sdir.mkdir(parents=True, exist_ok=True)
    if opts.resume:
        s.stored.setdefault("resumes", []).append(
            {"command": opts.command, "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
             "time_budget": opts.time_budget, "trials": s.trials, "arithmetic": ARITHMETIC})
        s.stored["arithmetic"] = ARITHMETIC  # its trials' states are this version's from now
        _write_json(sdir / "search.json", s.stored)
        return
    if space.path.is_file():
        shutil.copyfile(space.path, sdir / "space.yaml")
    _write_json(sdir / "search.json", {
        "name": s.name, "task": s.task_name, "target": s.target, "space": space.name,
        "seed": opts.seed,
        "space_path": str((sdir / "space.yaml") if space.path.is_file() else space.path),
        "mlflow_uri": s.mlflow_uri, "optuna_storage": s.optuna_url, "options": asdict(opts),
        "trials": s.trials,  # the cap it ran under (a resume without -n keeps it)
        "command": opts.command, "from_entry": _from_entry_record(s.start),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "arithsweep_version": __version__,
        "arithmetic": ARITHMETIC, "search_format": SEARCH_FORMAT})
    if s.start is not None:  # the starting incumbent, kept like any verified one
        from arithsweep.search.propose.incumbent import save_verified

        save_verified(sdir, {s.start["trial_id"]: _lean(s.start)})


def _run(s: _Search, on_update: Callable[[dict], None] | None,
         verifier: Verifier | None) -> tuple[SearchSummary, dict, str]:
    """MLflow and Ray up, the fit, its summary: (summary, the last run's summary.json, the
    MLflow parent run)."""
    import ray

    from arithsweep.search import run_settings, snapshots, tuner
    from arithsweep.search.report import tracking
    from arithsweep.search.report.results import retire_waiting, summarise
    from arithsweep.search.trials import replay

    experiment_id, parent_run, started = _start_services(s)
    state = _register(s, on_update, verifier)
    state.mlflow, state.folder = (s.mlflow_uri, experiment_id, parent_run), str(s.sdir)
    before = _read_json(s.sdir / "summary.json") if s.opts.resume else {}
    # the trials' rule (a resumed Tuner keeps the constants it was started with)
    near = float((s.stored.get("options") or {}).get("near_miss", s.opts.near_miss))
    try:
        if s.opts.resume and (s.sdir / TUNE_DIR).is_dir():  # a snapshot cut off by the kill
            snapshots.repair(s.sdir / TUNE_DIR)
        replayed = replay.prepare_resume(s.opts, s.sdir / TUNE_DIR, s.optuna_url, s.target,
                                         near, before, state)
        results = tuner.fit(s, s.sdir / TUNE_DIR, experiment_id, parent_run)
        summary = summarise(s, results, experiment_id, state, near)
        summary.replayed = replayed
        retire_waiting(s.name, s.optuna_url)
    except BaseException:
        # Killed or broken: the parent run says so; `resume` continues where Tune saved.
        tracking.mlflow_client(s.mlflow_uri).set_terminated(parent_run, "KILLED")
        raise
    finally:
        run_settings.unregister(s.name)
        if started:
            ray.shutdown()
    return summary, before, parent_run


def _start_services(s: _Search) -> tuple[str, str, bool]:
    """The search's MLflow experiment and parent run, and Ray (started or joined): (experiment
    id, parent run id, whether this call started Ray). A new search whose MLflow or Ray fails
    leaves no folder: its name stays free for the corrected command."""
    from arithsweep.search.report import tracking

    try:
        try:
            experiment_id, parent_run = tracking.mlflow_setup(
                s.mlflow_uri, s.root, s.task_name, s.name, s.space.name, s.target,
                bool(s.opts.resume))
        except Exception as exc:  # unreachable server, bad URI, locked file
            raise ArithsweepError(
                f"MLflow at {s.mlflow_uri}: {cluster.first_line(exc)}") from None
        return experiment_id, parent_run, cluster.ray_up(s.opts)
    except BaseException:
        if s.fresh:
            shutil.rmtree(s.sdir, ignore_errors=True)
        raise


def _register(s: _Search, on_update: Callable[[dict], None] | None,
              verifier: Verifier | None) -> Any:
    """The running search's state (run_settings.DriverState), which its searcher, stoppers and
    callbacks read by name: deadline, incumbent (a resumed search keeps its own), verifier."""
    from arithsweep.search import run_settings
    from arithsweep.search.propose import incumbent

    opts = s.opts
    deadline = s.t0 + opts.time_budget if opts.time_budget else None  # startup counts
    verified = incumbent.load_verified(s.sdir)
    state = run_settings.register(s.name, run_settings.DriverState(
        trials=sys.maxsize if s.trials is None else s.trials, deadline=deadline,
        on_update=on_update, verifier=verifier,
        max_params=opts.max_params, frontier=opts.frontier, verified=verified,
        incumbent=incumbent.incumbent_of(verified)))
    if on_update is not None:  # every live event says where the search stands
        state.on_update = lambda event: on_update(
            {**event, "search": _progress(s.name, s.t0, opts, state)})
        run_settings.emit(s.name, {"event": "search", "trial_id": None})  # before any trial
    return state


def _close(s: _Search, summary: SearchSummary, before: dict, parent_run: str) -> SearchSummary:
    """summary.json and the MLflow parent run's record, with this run's and all runs' time."""
    from arithsweep.search.report import tracking

    opts = s.opts
    summary.from_entry = (s.stored.get("from_entry") if opts.resume
                          else _from_entry_record(s.start))
    summary.wall_time = round(time.time() - s.t0, 2)
    summary.total_wall_time = round(summary.wall_time + float(
        before.get("total_wall_time") or before.get("wall_time") or 0.0), 2)
    _write_json(s.sdir / "summary.json", summary.to_dict())
    tracking.mlflow_close(s.mlflow_uri, parent_run, summary, s.sdir)
    return summary


def _from_entry_record(start: dict | None) -> dict | None:
    """search.json's "from_entry": the entry a search started from, how it mapped onto the
    space, and the commands of the searches that found it ("chain"), which `publish` prints
    before this search's own command."""
    if start is None:
        return None
    keys = ("from_entry", "entry_id", "task", "format", "params", "exact_match", "checkpoint",
            "found_by", "seeds_reached", "seeds_trained", "point", "unmapped", "differs",
            "note", "chain", "board")
    return {"ref" if k == "from_entry" else k: start.get(k) for k in keys}


def _lean(start: dict) -> dict:
    """The starting entry as a verified item (verified.json): no mapping report, no chain."""
    return {k: v for k, v in start.items() if k not in ("unmapped", "differs", "chain")}


def _progress(name: str, t0: float, opts: SearchOptions, state) -> dict[str, Any]:
    """The live view's `SearchProgress`, from the driver's state as it is now."""
    ok = [v for v in state.verified.values() if v.get("qualifies")]
    best = min(ok, key=lambda v: (int(v["params"]), -float(v.get("exact_match") or 0.0)),
               default=None)
    return asdict(SearchProgress(
        name=name, started=t0, time_budget=opts.time_budget, cpus_per_trial=opts.cpus_per_trial,
        skipped=len(state.skipped), incumbent=None if best is None else {
            k: best.get(k) for k in ("params", "exact_match", "entry_id", "trial_id")}))


def _stored_options(sdir: Path, opts: SearchOptions) -> dict[str, Any]:
    """For a resume, the settings the search was started with (they may not change)."""
    if not opts.resume:
        if sdir.exists():
            raise ConfigError(f"search {sdir.name!r} already exists in {sdir.parent}: "
                              f"resume it (--resume {sdir.name}) or pick another --name")
        return {}
    meta = sdir / "search.json"
    if not meta.is_file():
        raise ConfigError(f"cannot resume {sdir.name!r}: no search.json in {sdir}")
    stored = json.loads(meta.read_text())
    made = stored.get("search_format", 1)  # searches before the field: format 1
    if made != SEARCH_FORMAT:
        raise ConfigError(
            f"cannot resume {sdir.name!r}: it was made by arithsweep "
            f"{stored.get('arithsweep_version', 'before 0.1.0 search format 2')} (search format "
            f"{made}) and this is {__version__} (format {SEARCH_FORMAT}), whose pickled Tune "
            f"state and spaces differ; start a new search (its verified entries stay on the "
            f"leaderboard)")
    if version_of(stored) != ARITHMETIC and not opts.restart_unfinished:  # other floats
        raise ConfigError(state_refused(f"cannot resume {sdir.name!r}", version_of(stored))
                          + ", or resume it here with --restart-unfinished (its finished "
                          "trials stand, its unfinished ones train again from step 0)")
    for key, given in (("task", opts.task), ("target", opts.target)):
        if given is not None and given != stored.get(key):
            raise ConfigError(f"cannot resume {sdir.name!r} with {key}={given!r}: it was "
                              f"started with {key}={stored.get(key)!r}")
    return stored


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    os.replace(tmp, path)


def _read_json(path: Path) -> dict:
    """A JSON file the search wrote earlier; {} when absent or unreadable (a killed run)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}
