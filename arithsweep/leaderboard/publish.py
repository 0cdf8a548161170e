"""The leaderboard's output formats, and `publish`: LEADERBOARD.md plus the checkpoints it lists.

The string formats (`to_json`, `to_csv`, `to_markdown`) live in `tables`; the folder's layout,
what publish may overwrite there and the staged swap into it in `publish_dir`.
`publish(rows, "leaderboard")` writes the folder a project commits to show its results:

    leaderboard/LEADERBOARD.md                          generated; one table, per entry the
                                                        commands that retrain and re-verify it,
                                                        then a section per seed project
                                                        (leaderboard/projects.py)
    leaderboard/entries.json                            the same entries as data, which
                                                        `arithsweep leaderboard` lists on a
                                                        clone without a database
                                                        (leaderboard/published.py)
    leaderboard/pictures/                               committed by hand (ood, inspect PNGs);
                                                        linked from the project sections
    leaderboard/checkpoints/<task>-<params>-<sha8>/     model.safetensors + config.json, copied
                                                        and checked against the verified sha256,
                                                        and entry.json: the entry's id and
                                                        provenance (leaderboard/provenance.py)

A published entry whose weights the database does not hold (a fresh clone, a lost database)
is not dropped silently: `publish` refuses until it is re-recorded from its folder (`arithsweep
verify leaderboard/checkpoints/NAME --record`) or `drop` says to remove it.

Nothing is half-written: everything is staged in a temporary folder beside the destination and
renamed into place only once every copy has been checked. No torch (hashes via core.hashing): the
fast `arithsweep leaderboard` path imports this module.

    arithsweep publish --dir leaderboard
    python -c "from arithsweep.leaderboard.board import open_db; \\
        from arithsweep.leaderboard.tables import to_markdown; \\
        print(to_markdown(open_db(create=False).query()))"
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

from arithsweep import __version__
from arithsweep.core.arithmetic import retrains
from arithsweep.core.errors import ArithsweepError
from arithsweep.core.evaluation.stats import class_health, percent, protocol_line
from arithsweep.core.hashing import sha256_file
from arithsweep.leaderboard.projects import project_sections
from arithsweep.leaderboard.provenance import (
    ENTRY_FILE,
    START,
    _read,
    entry_record,
    pack_lines,
    published_reproduce,
    search_lines,
    start_lines,
)
from arithsweep.leaderboard.publish_dir import (
    CHECKPOINT_FILES,
    CHECKPOINTS,
    DIR_NAME,
    GENERATED,
    MARKDOWN,
    check_destination,
    forget,
    swap_in,
    unrecorded,
)
from arithsweep.leaderboard.published import INDEX, index_entry, index_text
from arithsweep.leaderboard.report import TARGET
from arithsweep.leaderboard.tables import _count, _md_table

PUBLISHED_COLUMNS = ("task", "params", "exact match", "nines", "problems checked",
                     "architecture", "seeds reached", "checkpoint")  # fmt: skip


def select_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """From `Leaderboard.query(all=True)` rows (best first): the best entry of each task, the
    smallest entry of each (task, target) pair, so a model verified against a stricter target
    stays listed next to a smaller one that only met a looser target, and the first entry with
    the most nines of each task, so an exact model stays listed beside a smaller 2-nines one
    (Quirke's measure is nines), and the smallest entry a search found of each task, so what
    `arithsweep search` itself verified stays listed beside a recipe's run of the same size."""
    most: dict[Any, dict[str, Any]] = {}
    searched: dict[Any, dict[str, Any]] = {}
    for row in rows:
        top = most.get(row.get("task"))
        if top is None or (row.get("nines") or 0) > (top.get("nines") or 0):
            most[row.get("task")] = row
        if row.get("search_name"):
            searched.setdefault(row.get("task"), row)
    seen: set[tuple[Any, ...]] = set()
    keep = []
    for row in rows:
        keys = {(row.get("task"),), (row.get("task"), row.get("target"))}
        if keys - seen or row is most.get(row.get("task")) or row is searched.get(row.get("task")):
            keep.append(row)
        seen |= keys
    return keep


def checkpoint_dir_name(row: dict[str, Any]) -> str:
    """`<task>-<params>-<sha8>`: readable, and unique through the weights' hash."""
    name = f"{row.get('task')}-{row.get('params')}-{str(row.get('sha256'))[:8]}"
    if not DIR_NAME.fullmatch(name):  # a row from a hand-edited database: no path tricks
        raise ArithsweepError(f"entry {row.get('id')}: cannot publish it as folder {name!r}")
    return name


def verify_command(row: dict[str, Any], checkpoint_dir: str) -> str:
    parts = ["arithsweep", "verify", checkpoint_dir]
    target = row.get("target")
    if target is not None and float(target) != TARGET:  # verify's default
        parts += ["--target", f"{float(target):g}"]
    return shlex.join(parts)


def _worst_line(row: dict[str, Any]) -> list[str]:
    """The entry's weakest natural class (result 0, all-nines operands, longest carry chains,
    operand and answer lengths, Quirke classes), which its headline figure can hide."""
    health = class_health(row.get("breakdown") or {})
    if not health:
        return []
    name, n, em = health[0]
    if em == 1.0:
        return ["", "Worst class: none, every class exact."]
    verdict = " (fails entirely)" if em == 0 else " (fails mostly)" if em < 0.5 else ""
    return ["", f"Worst class: {name}, {percent(em)} of {_count(n)}{verdict}."]


def _protocol_lines(row: dict[str, Any]) -> list[str]:
    """The outside boards' protocols the entry's verification ran (add10: AdderBoard's own
    10,010 problems), each against that board's bar."""
    done = (row.get("breakdown") or {}).get("by_protocol") or {}
    return ["", *(f"{protocol_line(k, b)}." for k, b in done.items())] if done else []


def retrain_header(config: dict[str, Any]) -> str:
    """"Retrain it" with where and with which code the command gives the published weights
    again: the machines the checkpoint's meta records (core.training.train.repeats) and the
    commit of its arithmetic (core.arithmetic), or, for an entry trained before it recorded
    where, that a retrain may reach other floats (docs/training.md)."""
    where = (config.get("meta") or {}).get("repeats")
    if where:
        return (f"Retrain it, the same weights (sha256 above) on {where} with the torch version "
                f"that trained it; {retrains(config)}:")
    return ("Retrain it (trained before arithsweep pinned its kernel's rounding: the command "
            "trains this recipe, but to other floats than the published weights, which may "
            "land on another model; the weights above are what re-verifies):")


def seeds_reached(row: dict[str, Any], config: dict[str, Any]) -> str:
    """Seeds that reached the target, as "reached/trained" (or "reached"), when the entry or its
    checkpoint's config.json (meta, metrics) records `seeds_reached`; else "not recorded" (a
    checkpoint saved before the count was kept describes only its best seed)."""
    for source in (row, row.get("train_config") or {}, config.get("meta") or {},
                   config.get("metrics") or {}):
        reached = source.get("seeds_reached") if isinstance(source, dict) else None
        if reached is not None:
            trained = source.get("seeds_trained")
            return str(reached) if trained is None else f"{reached}/{trained}"
    return "not recorded"


def _copy_checkpoint(row: dict[str, Any], dst: Path) -> dict[str, Any]:
    """Copy the entry's checkpoint into `dst` and check the copy; returns its config.json."""
    src, sha = Path(str(row.get("checkpoint_path"))), str(row.get("sha256"))
    what = f"entry {row.get('id')} ({row.get('task')}, {row.get('params')} params)"
    for name in CHECKPOINT_FILES:
        if not (src / name).is_file():
            raise ArithsweepError(f"{what}: checkpoint file {src / name} is missing")
    dst.mkdir(parents=True)
    for name in CHECKPOINT_FILES:
        shutil.copyfile(src / name, dst / name)
    digest = sha256_file(dst / CHECKPOINT_FILES[0])
    if digest != sha:
        raise ArithsweepError(
            f"{what}: {src / CHECKPOINT_FILES[0]} has sha256 {digest[:12]}…, not the verified "
            f"{sha[:12]}…; re-verify it (arithsweep verify {src} --record)")
    try:
        config = json.loads((dst / CHECKPOINT_FILES[1]).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArithsweepError(f"{what}: {src / CHECKPOINT_FILES[1]} is not JSON ({e})") from e
    claimed = config.get("weights_sha256") if isinstance(config, dict) else None
    if not isinstance(config, dict) or claimed not in (None, sha):
        raise ArithsweepError(f"{what}: {src / CHECKPOINT_FILES[1]} names other weights")
    meta = config.get("meta") or {}
    if (config.get("train") or {}).get("init_from") == START:
        _copy_start(src / START, dst / START, meta.get("init_from_sha256"), what)
    elif isinstance(meta.get("finish_set"), dict):  # `arithsweep finish` began from it
        _copy_start(src / START, dst / START, meta.get("finished_from"), what)
    return config


def _copy_start(src: Path, dst: Path, sha: str | None, what: str) -> None:
    """A continued entry's start (checkpoint.keep_start), which its retrain command begins
    from: copied with its own start if it has one, its weights checked against the sha256 the
    entry recorded."""
    if not all((src / name).is_file() for name in CHECKPOINT_FILES):
        raise ArithsweepError(f"{what}: it continued from {src}, which is missing; its retrain "
                              f"command could not run")
    dst.mkdir(parents=True)
    for name in CHECKPOINT_FILES:
        shutil.copyfile(src / name, dst / name)
    if sha is not None and sha256_file(dst / CHECKPOINT_FILES[0]) != sha:
        raise ArithsweepError(f"{what}: its start {src} is not the one it recorded "
                              f"(sha256 {sha[:12]}…)")
    if (src / START).is_dir():
        _copy_start(src / START, dst / START, None, what)


def leaderboard_markdown(
    rows: list[dict[str, Any]],
    configs: list[dict[str, Any]],
    dest_label: str,
    extra_sections: list[str] | None = None,
    provenance: list[list[str]] | None = None,
    starts: list[dict[str, Any] | None] | None = None,
) -> str:
    """LEADERBOARD.md for `rows` published under `dest_label` (the --dir as given, which is
    where the commands expect the checkpoints); `configs` are their config.json contents,
    `provenance` each row's `search_lines` (none when not given), `starts` the config.json of
    each one's published start (None where it has none)."""
    sizes = [r.get("suite_size") or r.get("n_problems") or 0 for r in rows]
    suites = ", ".join(sorted({str(r.get("suite")) for r in rows}))
    span = f"{min(sizes):,}" if min(sizes) == max(sizes) else f"{min(sizes):,} to {max(sizes):,}"
    out = [
        f"{GENERATED} (arithsweep {__version__}) from the leaderboard database; "
        "edits here are overwritten. -->",
        "",
        "# arithsweep leaderboard",
        "",
        "arithsweep searches for the smallest transformer that does "
        "integer arithmetic exactly. Every row below was verified from its weights alone: "
        "the parameter count is recomputed from the loaded tensors, and the exact match is "
        f"measured by `arithsweep verify` with suite {suites} ({span} problems per entry: "
        "every problem when a task has at most a million, otherwise a fixed held-out sample "
        "with edge cases and carry cascades). Each checkpoint folder holds the "
        "`model.safetensors` whose sha256 was verified and its `config.json`.",
        "",
    ]
    body = []
    for row, config in zip(rows, configs):
        name = checkpoint_dir_name(row)
        body.append([str(row.get("task", "")), str(row.get("params", "")),
                     percent(row.get("exact_match")), str(row.get("nines", "")),
                     _count(row.get("n_problems")), str(row.get("architecture") or ""),
                     seeds_reached(row, config), f"[{name}]({CHECKPOINTS}/{name}/)"])
    out += _md_table(PUBLISHED_COLUMNS, body)
    for row, config, found, start in zip(rows, configs, provenance or [[]] * len(rows),
                                         starts or [None] * len(rows)):
        name = checkpoint_dir_name(row)
        folder = f"{dest_label}/{CHECKPOINTS}/{name}"
        out += [
            "", f"## {row.get('task')} · {row.get('params')} params · {name[-8:]}", "",
            f"Entry {row.get('id')}: exact match {percent(row.get('exact_match'))} on "
            f"{_count(row.get('n_problems'))} problems ({_count(row.get('n_failures'))} failed, "
            f"suite {row.get('suite')}, target {row.get('target')}), verified "
            f"{str(row.get('verified_at') or row.get('created_at') or '')[:10]}; weights "
            f"sha256 `{row.get('sha256')}`.", *_worst_line(row), *_protocol_lines(row),
            *found,
            "", retrain_header(config), "", "```sh",
            published_reproduce(row, f"{folder}/config.json"), "```",
            *start_lines(config, folder, start),
            *pack_lines(row, f"{folder}/config.json", config),
            "", "Re-verify the published weights:", "", "```sh",
            verify_command(row, folder), "```",
        ]
    for section in extra_sections or []:
        if not isinstance(section, str):
            raise ArithsweepError(f"an extra markdown section must be text, not {section!r}")
        out += ["", section.strip("\n")]
    return "\n".join(out) + "\n"


def _label(dest: Path) -> str:
    """How LEADERBOARD.md's commands name the folder: relative to where publish ran (the
    repository root, usually), never an absolute path of one machine; a folder outside it by
    its own name."""
    rel = Path(os.path.relpath(dest.absolute()))
    return (dest.name if rel.parts and rel.parts[0] == ".." else rel.as_posix()) or "."


def publish(
    board_rows: list[dict[str, Any]],
    dest_dir: str | Path,
    extra_sections: list[str] | None = None,
    searches_root: str | Path | None = "searches",
    known: list[str] | None = None,
    drop: bool = False,
) -> dict[str, Any]:
    """Write `dest_dir`/LEADERBOARD.md and `dest_dir`/checkpoints/ for `board_rows`, replacing a
    previous publication there (and only that: the database may live in the same folder).
    `extra_sections` (markdown strings) are appended to LEADERBOARD.md; an entry a search
    found names it, with its command and cost when `searches_root`/<name> is there (see
    `provenance`). A previously published checkpoint whose weights are not in `known` (every
    sha256 the database holds; default: `board_rows`') stops the publication unless `drop`.
    Returns a summary."""
    rows, seen = [], set()
    for row in board_rows:  # one folder per checkpoint, even if a caller lists one twice
        if row.get("sha256") not in seen:
            seen.add(row.get("sha256"))
            rows.append(row)
    if not rows:
        raise ArithsweepError("nothing to publish: no verified entries "
                              "(add one: arithsweep verify CHECKPOINT --record)")
    names = [checkpoint_dir_name(r) for r in rows]
    if len(set(names)) < len(names):
        raise ArithsweepError("two entries share a checkpoint folder name; publish fewer")
    dest = Path(dest_dir)
    made = [p for p in [dest, *dest.parents] if not p.exists()]  # to undo on failure
    stage: Path | None = None
    try:
        check_destination(dest)
        lost = unrecorded(dest, {str(r.get("sha256")) for r in rows} | set(known or ()))
        if lost and not drop:
            more = f" and {len(lost) - 3} more" if len(lost) > 3 else ""
            raise ArithsweepError(
                f"{dest / CHECKPOINTS} holds {len(lost)} published entr"
                f"{'y' if len(lost) == 1 else 'ies'} the database does not ({', '.join(lost[:3])}"
                f"{more}); re-record {'it' if len(lost) == 1 else 'each'} first (arithsweep "
                f"verify {dest / CHECKPOINTS}/{lost[0]} --record), or pass --drop to remove them")
        dest.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{dest.name}.publish-", dir=dest.parent))
        configs = [_copy_checkpoint(r, stage / CHECKPOINTS / n) for r, n in zip(rows, names)]
        # read before the swap: without its search folder a row falls back on its old entry.json
        found = [search_lines(r, searches_root) for r in rows]
        commands = [published_reproduce(r, f"{_label(dest)}/{CHECKPOINTS}/{n}/config.json")
                    for r, n in zip(rows, names)]
        for r, n, lines, cmd in zip(rows, names, found, commands):
            (stage / CHECKPOINTS / n / ENTRY_FILE).write_text(
                json.dumps(entry_record(r, lines, cmd), indent=2) + "\n")
        by_sha = {r.get("sha256"): c for r, c in zip(rows, configs)}
        sections = project_sections(rows, dest, lambda r: seeds_reached(r, by_sha[r["sha256"]]))
        starts = [_read(stage / CHECKPOINTS / n / START / CHECKPOINT_FILES[1]) for n in names]
        text = leaderboard_markdown(rows, configs, _label(dest),
                                    sections + list(extra_sections or []), found, starts)
        (stage / MARKDOWN).write_text(text, encoding="utf-8")
        (stage / INDEX).write_text(index_text([index_entry(
            r, n, seeds_reached(r, c), cmd, c)
            for r, n, c, cmd in zip(rows, names, configs, commands)]), encoding="utf-8")
        dest.mkdir(exist_ok=True)
        swap_in(stage, dest)
    except OSError as e:
        forget(stage, made)
        raise ArithsweepError(f"cannot publish to {dest}: {e.strerror or e} "
                              f"({e.filename or dest})") from e
    except BaseException:
        forget(stage, made)
        raise
    shutil.rmtree(stage, ignore_errors=True)  # now holds only the previous checkpoints
    return {"dir": str(dest), "markdown": str(dest / MARKDOWN), "entries": [
        {"id": r.get("id"), "task": r.get("task"), "params": r.get("params"),
         "sha256": r.get("sha256"), "checkpoint": str(dest / CHECKPOINTS / n)}
        for r, n in zip(rows, names)]}
