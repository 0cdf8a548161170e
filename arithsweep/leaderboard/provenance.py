"""Where a published entry came from when `arithsweep search` found it, for LEADERBOARD.md.

An entry recorded by a search names the search and the trial (`search_name`, `trial_id`); the
search's own folder (`searches/<name>/search.json` and `summary.json`, written by the search
driver) holds the command that started it, its wall time and how much it tried. `publish`
reads that folder when it is there (under the searches root, a `publish` option, or above the
entry's verified checkpoint, which sits inside its search's folder), so a row says
"found by this command, in this long, after this many architectures and seeds" instead of
leaving a reader to take the size on trust; without the folder the row still names the search.

    from arithsweep.leaderboard.provenance import search_lines
    print("\n".join(search_lines({"search_name": "add10-cpu", "trial_id": "1449389c"},
                                 "searches")))

Search folders and the leaderboard database are local (git-ignored), so `publish` also writes
each entry's provenance beside its published checkpoint (`entry.json`: entry id, search,
trial, MLflow run, the lines printed here). `arithsweep verify <published folder> --record`
re-measures the weights and takes only that provenance from it, never a result, so a fresh
clone rebuilds its database from `leaderboard/checkpoints/` and republishes without losing
where an entry came from. The retrain commands (`published_reproduce`, and `pack_reproduce`
for an entry trained beside other seeds) live here too: they are provenance a reader can run.

A search started from a board entry (`arithsweep search --from-entry ID_OR_PATH`) continues
the search that found it: `entry_lookup.board_entry` looks the entry up and `entry_chain` here
gives the commands of the searches that led to it, which the new search keeps in its
search.json; the section of an entry it finds then names the whole chain, oldest first.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from arithsweep.core.arithmetic import ALONE_AS_IN_A_PACK, alone_as_in_pack, at_commit, version_of

# where a search keeps what it finds, not what it finds: a path of the machine that ran it,
# which a reader's copy of the command would trip over
STORAGE_OPTIONS = ("--db", "--root", "--mlflow-uri")
# core.model.checkpoint.START (that module imports torch): the folder inside a continued
# checkpoint holding the start it continued, which its config names relatively
START = "start"


def portable(cmd: str) -> str:
    """`cmd` without its storage options (STORAGE_OPTIONS and their values), for a reader."""
    try:
        words = shlex.split(cmd)
    except ValueError:  # unbalanced quotes: shown as recorded
        return cmd
    kept, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w in STORAGE_OPTIONS:
            skip = True
        elif not w.startswith(tuple(f"{o}=" for o in STORAGE_OPTIONS)):
            kept.append(w)
    return cmd if len(kept) == len(words) else shlex.join(kept)


def search_command(meta: dict[str, Any]) -> tuple[str, bool]:
    """(command, recorded): the command line search.json recorded (less its storage options),
    else one rebuilt from its options (searches made before the command was recorded), which
    `recorded` False marks."""
    if isinstance(meta.get("command"), str) and meta["command"].strip():
        cmd = portable(meta["command"])
        if "--space" not in cmd and "--resume" not in cmd and meta.get("space"):
            # the task's default space can change between versions (add10's did twice): the
            # space it ran in, named, so the command runs the same search today
            cmd += f" --space {shlex.quote(str(meta['space']))}"
        return cmd, True
    o = meta.get("options") or {}
    parts = ["arithsweep", "search", "--task", str(meta.get("task") or o.get("task")),
             "--target", f"{meta.get('target') or o.get('target')}"]
    if o.get("space"):
        parts += ["--space", str(o["space"])]
    if o.get("trials") is not None:
        parts += ["--trials", str(o["trials"])]
    if o.get("concurrency"):
        parts += ["-j", str(o["concurrency"])]
    if o.get("address"):
        parts += ["--address", str(o["address"])]
    budget = float(o.get("time_budget") or 0)
    if budget:
        parts += ["--time-budget", f"{budget / 60:g}m" if budget % 60 == 0 else f"{budget:g}s"]
    if o.get("from_entry"):
        parts += ["--from-entry", str(o["from_entry"])]
    parts += ["--seed", str(o.get("seed", 0)), "--name", str(meta.get("name"))]
    return shlex.join(parts), False


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def search_dir(row: dict[str, Any], searches_root: str | Path | None) -> Path | None:
    """The folder of the search that found `row`: `<searches_root>/<name>`, else the folder of
    that name above the entry's own checkpoint (a search run with `--root` elsewhere keeps
    its checkpoints inside its folder), so one `publish` finds searches from several roots."""
    name = str(row.get("search_name") or "")
    if not name:
        return None
    places = [Path(searches_root) / name] if searches_root else []
    if row.get("checkpoint_path"):
        places += [p for p in Path(str(row["checkpoint_path"])).parents if p.name == name]
    return next((p for p in places if (p / "search.json").is_file()), None)


ENTRY_FILE = "entry.json"  # beside a published checkpoint: where the entry came from
ENTRY_FORMAT = "arithsweep-entry"
PROVENANCE = ("search_name", "trial_id", "mlflow_run_id")  # what a re-recording takes back


def entry_record(row: dict[str, Any], lines: list[str],
                 reproduce: str | None = None) -> dict[str, Any]:
    """entry.json for a published row: its id and provenance, no results (those are
    re-measured from the weights whenever the entry is recorded again). `reproduce` is its
    published retrain command: the one that trained it, which a re-recording keeps, where
    today's rule for a checkpoint could write another that was never run."""
    return {"format": ENTRY_FORMAT, "version": 1, "entry_id": row.get("id"),
            "sha256": row.get("sha256"), "target": row.get("target"),
            **{k: row.get(k) for k in PROVENANCE},
            **({"reproduce": reproduce} if reproduce else {}),
            "search_lines": lines}


def published_entry(folder: str | Path | None, sha256: str | None = None) -> dict[str, Any]:
    """The entry.json published in `folder` (JSON only, never code), or {} when there is none,
    it is not ours, or it names other weights than `sha256`."""
    doc = _read(Path(folder) / ENTRY_FILE) if folder else None
    if not doc or doc.get("format") != ENTRY_FORMAT:
        return {}
    if sha256 is not None and str(doc.get("sha256") or "").lower() != str(sha256).lower():
        return {}
    return doc


def checkpoint_provenance(path: str | Path) -> dict[str, Any]:
    """For a checkpoint a search verified (`<search>/tune/trial_<id>/checkpoint_<n>/[p<j>/]best`):
    the search's name, the trial and its MLflow run, read from the search's `verified.json`, so
    that recording it again (into another database, `verify --record --db`) keeps where it came
    from; {} for any other folder."""
    try:
        here = Path(path).resolve()
    except OSError:
        return {}
    for folder in here.parents:
        meta = _read(folder / "search.json")
        if meta is None:
            continue
        for item in (_read(folder / "verified.json") or {}).values():
            if isinstance(item, dict) and item.get("checkpoint") and \
                    Path(str(item["checkpoint"])).resolve() == here:
                return {"search_name": meta.get("name") or folder.name,
                        "trial_id": item.get("trial_id"),
                        "mlflow_run_id": item.get("mlflow_run_id")}
        return {}
    return {}


def search_lines(row: dict[str, Any], searches_root: str | Path | None) -> list[str]:
    """Markdown lines for one entry's section: empty unless a search recorded it. Without the
    search's folder, the lines an earlier publication printed (its entry.json) stand in."""
    name = row.get("search_name")
    if not name:
        return []
    lines = ["", f"Found by `arithsweep search`, not by hand: search `{name}`, trial "
                 f"`{row.get('trial_id') or '?'}`."]
    sdir = search_dir(row, searches_root)
    meta = _read(sdir / "search.json") if sdir else None
    if meta is None:
        kept = published_entry(row.get("checkpoint_path"), row.get("sha256"))
        old = kept.get("search_lines")
        same = kept.get("search_name") == name
        if same and isinstance(old, list) and all(isinstance(x, str) for x in old) and old:
            return old
        return lines
    cmd, recorded = search_command(meta)
    resumes = [r for r in meta.get("resumes") or [] if isinstance(r, dict)]
    lines += _start_lines(meta.get("from_entry"),
                          board=not (meta.get("options") or {}).get("from_entry"))
    lines += ["", "The search" + ("" if recorded else " (its command rebuilt from the options "
                                  "it recorded)") + ":", "", "```sh", cmd, "```"]
    if resumes:
        times = "once" if len(resumes) == 1 else f"{len(resumes)} times"
        lines += ["", f"It was resumed {times} after it stopped (`--resume`; the counts below "
                      "cover every run):", "", "```sh",
                  *[portable(str(r.get("command") or f"arithsweep search --resume {name}"))
                    for r in resumes], "```"]
    summary = _read(sdir / "summary.json")
    if summary is None:  # still running, or killed before it summed up
        return lines
    archs = summary.get("architectures") or []
    seeds = sum(int(a.get("seeds_trained") or 0) for a in archs)
    cpu = summary.get("cpu_hours")
    n = summary.get("n_trials", "?")
    # the architectures hold finished proposals only: one the search's end or a Ctrl-C cut
    # off trained too, but has no seed count, so say how many those were
    done = sum(int(a.get("trials") or 0) for a in archs)
    cut = n - done if isinstance(n, int) and all("trials" in a for a in archs) else 0
    props = f"{n} proposal{'' if n == 1 else 's'}"
    if cut <= 0:
        trained = f"{props} of {len(archs)} architectures ({seeds} seeds in all)"
    elif not done:  # stopped before any finished (a Ctrl-C): no seed count to give
        trained = f"{props}, cut off unfinished,"
    else:
        trained = (f"{props}, {done} of them to the end ({len(archs)} architectures, "
                   f"{seeds} seeds in all; {cut} cut off unfinished),")
    lines += ["", f"It trained {trained} and skipped "
                  f"{len(summary.get('skipped') or [])} untrained at or above its incumbent"
                  + (f" in {cpu:.2f} CPU-hours of trials" if cpu else "")
                  + (_resumed_minutes(summary) if resumes else
                     f", in {float(summary.get('wall_time') or 0) / 60:.0f} minutes") + "."]
    return lines


def _start_lines(start: Any, board: bool = False) -> list[str]:
    """For a search started from a board entry (`--from-entry`, or `board`: the board's
    smallest, as a new search starts): the entry, and the commands of the searches that
    found it (its "chain"), oldest first."""
    if not isinstance(start, dict):
        return []
    chain = [c for c in start.get("chain") or [] if isinstance(c, str) and c.strip()]
    what = f"entry {start.get('entry_id')} ({start.get('params')} p)"
    how = "the board's smallest, as a new search does" if board else "`--from-entry`"
    if not chain:
        return ["", f"It started from {what} as its verified incumbent ({how}); "
                    "that entry was not found by a search."]
    return ["", f"It started from {what} as its verified incumbent ({how}), "
                "continuing the searches that found it:", "", "```sh", *chain, "```"]


def search_chain(meta: dict[str, Any]) -> list[str]:
    """The commands that led to what a search finds, oldest first: the chain of the entry it
    started from (search.json's "from_entry"), its own command, then each resume's."""
    start = meta.get("from_entry") if isinstance(meta.get("from_entry"), dict) else {}
    earlier = [c for c in start.get("chain") or [] if isinstance(c, str)]
    resumes = [portable(str(r.get("command") or f"arithsweep search --resume {meta.get('name')}"))
               for r in meta.get("resumes") or [] if isinstance(r, dict)]
    return [*earlier, search_command(meta)[0], *resumes]


def entry_chain(row: dict[str, Any], searches_root: str | Path | None) -> list[str]:
    """The commands of the searches that led to a board entry, oldest first (see
    `search_chain`): from its search's folder when it is here, else from the lines its
    publication printed (entry.json); [] for an entry no search found."""
    if not row.get("search_name"):
        return []
    sdir = search_dir(row, searches_root)
    meta = _read(sdir / "search.json") if sdir else None
    if meta is not None:
        return search_chain(meta)
    kept = published_entry(row.get("checkpoint_path"), row.get("sha256"))
    if kept.get("search_name") != row["search_name"]:
        return []
    out, inside = [], False
    for line in kept.get("search_lines") or []:
        if isinstance(line, str) and line.startswith("```"):
            inside = line.strip() == "```sh"
        elif inside and isinstance(line, str):
            out.append(line)
    return out


def _resumed_minutes(summary: dict) -> str:
    """How long a resumed search ran: its runs together where the summary counts them (runs
    killed before they summed up are not in it), else the last run alone (older searches)."""
    last = float(summary.get("wall_time") or 0) / 60
    total = summary.get("total_wall_time")
    if not total:
        return f"; its last run took {last:.0f} minutes"
    return (f"; its finished runs took {float(total) / 60:.0f} minutes together "
            f"(the last {last:.0f})")


def pack_reproduce(row: dict[str, Any], config_path: str) -> str | None:
    """The command that trains the entry's whole pack (every seed it was trained beside, from
    the pack's first), or None when it was trained alone. One seed alone gets the member's
    initialisation and data; before arithmetic 6 a pack of the reference layout rounded
    differently from a single run, so there only the pack repeats the published run."""
    t = row.get("train_config") or {}
    seeds, first = t.get("seeds"), t.get("seed")
    if not isinstance(seeds, int) or isinstance(seeds, bool) or seeds < 2 \
            or not isinstance(first, int):
        return None
    parts = shlex.split(published_reproduce(row, config_path))
    if parts[:2] != ["arithsweep", "train"]:  # a finished entry: its start is one model
        return None
    if "--seeds" not in parts:  # its command trains the pack already (finished inside it)
        return None
    for flag, value in (("--seeds", seeds), ("--seed", first)):
        if flag in parts:
            parts[parts.index(flag) + 1] = str(value)
        else:
            parts += [flag, str(value)]
    return shlex.join(parts)


def pack_lines(row: dict[str, Any], config_path: str,
               config: dict[str, Any] | None = None) -> list[str]:
    """"Or its whole pack ..." under the one-seed command, saying whether the seed alone
    repeats the pack's numbers (a CPU run from arithmetic ALONE_AS_IN_A_PACK on)."""
    cmd = pack_reproduce(row, config_path)
    if cmd is None:
        return []
    why = ("one seed alone trains to the same weights as in it"
           if alone_as_in_pack((config or {}).get("meta")) else
           "one seed alone gets the same initialisation and data, but a pack of the "
           "reference layout rounded differently from a single run before arithmetic "
           f"{ALONE_AS_IN_A_PACK}, so there only the pack repeats the published run's numbers")
    return ["", f"Or its whole pack of {row['train_config']['seeds']} seeds, as it was trained "
                f"({why}):", "", "```sh", cmd, "```"]


def published_reproduce(row: dict[str, Any], config_path: str) -> str:
    """The entry's reproduce command with `--config` pointing at the published config.json."""
    try:
        parts = shlex.split(row.get("reproduce") or "")
    except ValueError:
        parts = []
    if parts[:2] == ["arithsweep", "finish"] and len(parts) > 2:  # from its published start
        return shlex.join([*parts[:2], str(Path(config_path).parent / START), *parts[3:]])
    if parts[:2] != ["arithsweep", "train"]:  # none recorded (or not ours): the standard one
        seed = row.get("seed")
        if seed is None:
            seed = (row.get("train_config") or {}).get("seed", 0)
        return shlex.join(["arithsweep", "train", "--task", str(row.get("task")),
                           "--format", str(row.get("format")), "--config", config_path,
                           "--seeds", "1", "--seed", str(seed)])
    out, i, replaced = [], 0, False
    while i < len(parts):
        if parts[i] == "--config" or parts[i].startswith("--config="):
            i += 1 if "=" in parts[i] else 2
            if not replaced:  # the first one is replaced in place, any repeat dropped
                out += ["--config", config_path]
                replaced = True
        else:
            out.append(parts[i])
            i += 1
    return shlex.join(out if replaced else [*out, "--config", config_path])


def start_lines(config: dict[str, Any], folder: str,
                start: dict[str, Any] | None = None) -> list[str]:
    """For an entry whose last training continued an earlier model (a search's continued
    near-miss round, `train --init-from`, `arithsweep finish`): where that start is published
    and how it retrains; `start` is that start's own config.json. Its config.json holds its
    pack's seeds, so `--config` alone trains the pack it was the best member of. A model that
    began from another run's state (not publishable) gets that run's command too."""
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    meta = config.get("meta") if isinstance(config.get("meta"), dict) else {}
    start_chain = state_chain(start or {}, f"{folder}/{START}", "That start")
    if isinstance(meta.get("finish_set"), dict):
        return ["", f"Its finishers began from the model published in `{folder}/{START}/` "
                f"(weights sha256 `{meta.get('finished_from')}`): the command above finishes "
                f"it again. How that start was trained is in its own "
                f"`{folder}/{START}/config.json`.", *start_chain]
    if train.get("init_from") != START:
        return state_chain(config, folder, "It")
    sha = meta.get("init_from_sha256")
    return ["", f"Its training continued an earlier model, published in `{folder}/{START}/`"
            + (f" (weights sha256 `{sha}`)" if sha else "") + ": the command above trains on "
            "from those weights. That start retrains, with the pack it was the best seed of:",
            "", "```sh", shlex.join(["arithsweep", "train", "--config",
                                     f"{folder}/{START}/config.json"]), "```", *start_chain]


def set_args(fields: dict[str, Any]) -> list[str]:
    """`--set k=v` arguments for train or finish, sorted by field, each value as JSON (which
    the CLI's YAML reads back as the same value)."""
    return [x for k, v in sorted(fields.items()) for x in ("--set", f"{k}={json.dumps(v)}")]


def state_chain(config: dict[str, Any], folder: str, who: str) -> list[str]:
    """For a model trained from every seed's state of another run (`--init-from <out>/resume`,
    meta `init_from_state`, see core.training.resume.state_origin): the two commands that
    retrain it from `folder`'s config.json, that run first (its fields set back)."""
    meta = config.get("meta") if isinstance(config.get("meta"), dict) else {}
    origin = meta.get("init_from_state")
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    if not isinstance(origin, dict) or not isinstance(origin.get("train"), dict):
        return []
    back = {k: v for k, v in origin["train"].items()
            if k != "init_from" and k in train and train[k] != v}
    cfg = f"{folder}/config.json"
    first = ["arithsweep", "train", "--config", cfg, "--set", "init_from=null",
             *set_args(back), "--out", "first"]
    then = ["arithsweep", "train", "--config", cfg, "--init-from", "first/resume",
            "--out", "then"]
    # a state of another arithmetic only started this run's weights (resume.latest_state):
    # its run retrains at its own version's commit
    v = version_of(origin)
    other = ("" if v == version_of(meta) else
             f" (the earlier one with arithmetic {v}, which {at_commit(v)})")
    return ["", f"{who} began from every seed's own training state at step "
            f"{origin.get('step')} of an earlier run: a state, which is not published (the "
            "`init_from` of its config.json is where it lay on the machine that trained it). "
            f"Both runs retrain from that config.json, the earlier one first{other}:",
            "", "```sh", shlex.join(first), shlex.join(then), "```"]
