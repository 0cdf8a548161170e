"""The published board as data: `entries.json`, beside LEADERBOARD.md and checkpoints/.

`arithsweep publish` writes it (one object per published entry: the figures its verification
measured, the checkpoint folder, provenance); `arithsweep leaderboard` reads it, so a fresh
clone, which has no database (it is not committed), lists the published entries, each marked
"published" and its weights' sha256 checked against the published one first (a mismatch is
listed as "sha256 mismatch", never as verified); `arithsweep verify --published` re-verifies
every one of them into a local database. No torch (hashes via core.hashing): the listing is
the fast `arithsweep leaderboard` path; `reverify` imports the verifier when it runs.

    arithsweep leaderboard --all                    # local entries and published ones
    arithsweep verify --published leaderboard       # re-verify and record all of them
    python -c "from arithsweep.leaderboard.published import published_rows; \\
        print([(r['task'], r['params'], r['status']) for r in published_rows('leaderboard')])"

A field the publication did not hold is null (entries published before the index existed
have no per-class breakdown or failure list: those are re-measured by `verify --published`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from arithsweep import __version__
from arithsweep.core.arithmetic import kind_of, retrain_commit, retrains, version_of
from arithsweep.core.errors import ArithsweepError
from arithsweep.core.hashing import sha256_file
from arithsweep.leaderboard.tables import COLUMNS, _md_table, cells

INDEX = "entries.json"
INDEX_FORMAT = "arithsweep-published"
INDEX_VERSION = 1
WEIGHTS = "model.safetensors"
# What an index entry holds, in this order: a leaderboard row's fields (`checkpoint` relative
# to the published folder instead of one machine's absolute path) plus LEADERBOARD.md's
# "seeds reached" and, from its config.json, the arithmetic that trained it and the commit
# that retrains it bit for bit (null: none does, or any of that arithmetic; `retrains` says
# which in words, as LEADERBOARD.md and `arithsweep show` print it).
FIELDS = ("id", "task", "format", "target", "params", "architecture", "exact_match",
          "n_problems", "n_failures", "nines", "wilson_lower", "suite", "suite_seed",
          "suite_size", "sha256", "checkpoint", "seeds_reached", "search_name", "trial_id",
          "mlflow_run_id", "seed", "steps", "wall_time", "device", "version", "reproduce",
          "arithmetic", "retrain_commit", "retrains", "created_at", "verified_at",
          "model_config", "train_config", "failures", "breakdown")  # fmt: skip
# A row's fields as `Leaderboard.query` returns them (schema order), then where it came from.
ROW_FIELDS = ("rank", "id", "task", "format", "target", "params", "model_config",
              "train_config", "architecture", "exact_match", "n_problems", "n_failures",
              "nines", "wilson_lower", "failures", "breakdown", "suite", "suite_seed",
              "checkpoint_path", "sha256", "mlflow_run_id", "search_name", "trial_id", "seed",
              "steps", "wall_time", "device", "version", "reproduce", "created_at",
              "suite_size", "verified_at")  # fmt: skip
SOURCE_FIELDS = ("source", "sha256_ok", "status")
_CHECKPOINT = re.compile(r"checkpoints/[A-Za-z0-9_.+-]+-\d+-[0-9a-f]{8}")


class PublishedIndexError(ArithsweepError):
    """entries.json is missing (beside published checkpoints), unreadable or not ours."""


# --- writing (publish) ---------------------------------------------------------------------


def index_entry(row: dict[str, Any], name: str, seeds: str, reproduce: str,
                config: dict[str, Any]) -> dict[str, Any]:
    """One index entry for a published leaderboard row: its checkpoint folder `name`, its
    "seeds reached" and its retrain command as LEADERBOARD.md prints them, and from its
    `config` (config.json) the arithmetic and commit that retrain it."""
    given = {"checkpoint": f"checkpoints/{name}", "seeds_reached": seeds, "reproduce": reproduce,
             **arithmetic_fields(config)}
    return {k: given[k] if k in given else row.get(k) for k in FIELDS}


def arithmetic_fields(config: dict[str, Any]) -> dict[str, Any]:
    """An entry's "arithmetic", "retrain_commit" and "retrains", from its config.json."""
    meta = config.get("meta") if isinstance(config.get("meta"), dict) else {}
    v = version_of(meta)
    commit = retrain_commit(v, kind_of(meta)) if meta.get("repeats") else None
    return {"arithmetic": v, "retrain_commit": commit,
            "retrains": retrains(config)}


def retrains_of(row: dict[str, Any]) -> str | None:
    """What `retrains` says of a board row: as published, else from its checkpoint's
    config.json (a local entry, or an index written before the field); None without one."""
    if row.get("retrains"):
        return str(row["retrains"])
    try:
        config = json.loads((Path(str(row.get("checkpoint_path"))) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return retrains(config) if isinstance(config, dict) else None


def index_text(entries: list[dict[str, Any]]) -> str:
    """entries.json's text (stable: the same rows give the same bytes)."""
    doc = {"format": INDEX_FORMAT, "version": INDEX_VERSION,
           "generated_by": f"arithsweep publish (arithsweep {__version__})",
           "entries": entries}
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def is_ours(path: Path) -> bool:
    """True when `path` is an index `publish` wrote (so `publish` may replace it)."""
    try:
        return json.loads(path.read_text(encoding="utf-8")).get("format") == INDEX_FORMAT
    except (OSError, ValueError, AttributeError):
        return False


# --- reading (leaderboard) -----------------------------------------------------------------


def default_folder(db_url: str) -> Path:
    """Where the published board is looked for by default: the folder of the SQLite database
    (`leaderboard/` for the default leaderboard/leaderboard.db, where `publish` writes), or
    `leaderboard/` here for a database that is not a file (PostgreSQL)."""
    from arithsweep.leaderboard.db import sqlite_path

    path = sqlite_path(db_url)
    return path.parent if path is not None else Path("leaderboard")


def label(folder: str | Path) -> str:
    """How messages name a folder: relative to here when it is below here."""
    rel = os.path.relpath(Path(folder).absolute())
    return str(folder) if rel.startswith("..") else Path(rel).as_posix()


def _check_entry(i: int, e: Any) -> str | None:
    """What is wrong with index entry `i`, or None."""
    if not isinstance(e, dict):
        return "is not an object"
    ints = ("params", "n_problems", "n_failures", "nines")
    bad = [k for k in ints if not isinstance(e.get(k), int) or isinstance(e.get(k), bool)]
    em = e.get("exact_match")
    if not isinstance(em, int | float) or isinstance(em, bool) or not 0 <= em <= 1:
        bad.append("exact_match")
    if not isinstance(e.get("task"), str) or not e.get("task"):
        bad.append("task")
    if not isinstance(e.get("sha256"), str) or not re.fullmatch(r"[0-9a-f]{64}", e["sha256"]):
        bad.append("sha256")
    if not isinstance(e.get("checkpoint"), str) or not _CHECKPOINT.fullmatch(e["checkpoint"]):
        bad.append("checkpoint")  # a folder under checkpoints/, never a path elsewhere
    if e.get("id") is not None and (not isinstance(e["id"], int) or isinstance(e["id"], bool)):
        bad.append("id")
    return f"has a missing or invalid {', '.join(bad)}" if bad else None


def read_index(folder: str | Path, required: bool = False) -> list[dict[str, Any]]:
    """The entries of `folder`/entries.json; [] when `folder` holds no publication at all
    (unless `required`: a folder named on purpose). Raises PublishedIndexError (one line,
    naming the file and the fix) when the index is missing beside published checkpoints,
    unreadable, or not an index this version reads."""
    folder = Path(folder)
    path, fix = folder / INDEX, "regenerate it with arithsweep publish"
    if not path.exists():
        if required:
            raise PublishedIndexError(f"{label(folder)} holds no published board ({INDEX}, "
                                      "which arithsweep publish writes)")
        ckpts = folder / "checkpoints"
        if ckpts.is_dir() and any(p.is_dir() for p in ckpts.iterdir()):
            raise PublishedIndexError(f"{label(path)} is missing beside the published "
                                      f"checkpoints in {label(ckpts)}; {fix}")
        return []
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise PublishedIndexError(f"{label(path)}: cannot read it ({e.strerror})") from None
    except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8
        why = f"line {e.lineno}: {e.msg}" if isinstance(e, json.JSONDecodeError) else "not UTF-8"
        raise PublishedIndexError(f"{label(path)} is not valid JSON ({why}); {fix}") from None
    if not isinstance(doc, dict) or doc.get("format") != INDEX_FORMAT:
        raise PublishedIndexError(f"{label(path)} is not an arithsweep published index; {fix}")
    if doc.get("version") != INDEX_VERSION:
        raise PublishedIndexError(f"{label(path)} has version {doc.get('version')!r}; this "
                                  f"arithsweep ({__version__}) reads version {INDEX_VERSION}")
    entries = doc.get("entries")
    if not isinstance(entries, list):
        raise PublishedIndexError(f"{label(path)} has no list of entries; {fix}")
    for i, e in enumerate(entries):
        wrong = _check_entry(i, e)
        if wrong:
            raise PublishedIndexError(f"{label(path)}: entry {i + 1} {wrong}; {fix}")
    return entries


def _weights_status(folder: Path, entry: dict[str, Any]) -> tuple[bool, str]:
    """(sha256 ok, status) of the published weights, hashed now."""
    weights = folder / entry["checkpoint"] / WEIGHTS
    try:
        digest = sha256_file(weights)
    except FileNotFoundError:
        return False, "weights missing"
    except OSError as e:
        return False, f"weights unreadable ({e.strerror})"
    return (True, "sha256 ok") if digest == entry["sha256"] else (False, "sha256 mismatch")


def published_rows(folder: str | Path, required: bool = False) -> list[dict[str, Any]]:
    """The published entries of `folder` as leaderboard rows (the keys `Leaderboard.query`
    returns, rank None until `merge` ranks them) marked source "published", each with its
    weights' sha256 checked: sha256_ok and status ("sha256 ok", "sha256 mismatch", "weights
    missing"). checkpoint_path names the folder as given, as LEADERBOARD.md does; `required`
    as `read_index`'s."""
    folder = Path(folder)
    rows = []
    for e in read_index(folder, required):
        ok, status = _weights_status(folder, e)
        row = {k: e.get(k) for k in ROW_FIELDS}
        row["checkpoint_path"] = f"{label(folder)}/{e['checkpoint']}"
        rows.append({**row, "source": "published", "sha256_ok": ok, "status": status})
    return rows


def as_local(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the local database with the same source fields as published ones (their
    weights were verified when recorded, not hashed again for a listing: sha256_ok null)."""
    return [{**r, "source": "local", "sha256_ok": None, "status": "verified"} for r in rows]


def _order(row: dict[str, Any]) -> tuple[Any, ...]:
    # Leaderboard.query's order: fewest params, then higher exact match, then earlier
    return (row.get("params") or 0, -(row.get("exact_match") or 0.0),
            str(row.get("created_at") or row.get("verified_at") or ""), row.get("id") or 0)


def merge(local: list[dict[str, Any]], published: list[dict[str, Any]],
          task: str | None = None, target: float | None = None, limit: int | None = None,
          all: bool = False) -> list[dict[str, Any]]:  # `all` as Leaderboard.query's
    """Local rows (`Leaderboard.query(task, all=True)`, any target) and published ones in one
    ranking, as `Leaderboard.query` ranks: a published entry the local database holds (same
    sha256) is listed once, as local. Only rows whose weights check out compete for a rank;
    one whose sha256 fails is always listed (rank None), so the failure is never hidden."""
    known = {r.get("sha256") for r in local}
    rows = [*as_local(local), *(r for r in published if r.get("sha256") not in known)]
    rows = [r for r in rows if (task is None or r.get("task") == task)
            and (target is None or (r.get("exact_match") or 0) >= target)]
    rows.sort(key=_order)
    places: dict[Any, int] = {}
    for r in rows:
        if r.get("sha256_ok") is False:
            r["rank"] = None
        else:
            places[r.get("task")] = r["rank"] = places.get(r.get("task"), 0) + 1
    kept = [r for r in rows if all or r["rank"] in (1, None)]
    return kept[:limit] if limit else kept


# --- the formats of `arithsweep leaderboard` with a source column --------------------------


def source_cell(row: dict[str, Any]) -> str:
    """"local", "published", or "published: sha256 mismatch" (and the like)."""
    if row.get("source") != "published":
        return "local"
    return "published" if row.get("sha256_ok") else f"published: {row.get('status')}"


def display_cells(row: dict[str, Any]) -> list[str]:
    """tables.cells with the published date (an index holds when it was verified)."""
    return cells({**row, "created_at": row.get("created_at") or row.get("verified_at")})


def to_markdown(rows: list[dict[str, Any]], title: str | None = None) -> str:
    """tables.to_markdown's table with a source column."""
    out = [f"## {title}", ""] if title else []
    body = [[*display_cells(r), source_cell(r)] for r in rows]
    return "\n".join(out + _md_table((*COLUMNS, "source"), body)) + "\n"


def add_source_columns(csv_text: str, rows: list[dict[str, Any]]) -> str:
    """tables.to_csv's text with source, sha256_ok and status appended to every row."""
    table = list(csv.reader(io.StringIO(csv_text)))
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*table[0], *SOURCE_FIELDS])
    for line, row in zip(table[1:], rows, strict=True):
        ok = row.get("sha256_ok")
        writer.writerow([*line, row.get("source"), "" if ok is None else str(ok).lower(),
                         row.get("status")])
    return buf.getvalue()


# --- re-verification (verify --published) --------------------------------------------------


def reverify(row: dict[str, Any], board: Any, progress: Any = None) -> dict[str, Any]:
    """Re-verify one published row's checkpoint with the current suite and record it in
    `board` (a Leaderboard) when it qualifies at its published target, under its published
    entry number where that is free. Weights whose sha256 fails are not verified at all.
    Returns what happened: status "recorded", "below target", the sha256 failure or an error,
    with the measured and the published exact match."""
    res = {"checkpoint": row.get("checkpoint_path"), "task": row.get("task"),
           "params": row.get("params"), "published_exact_match": row.get("exact_match"),
           "exact_match": None, "n_problems": None, "entry_id": None, "recorded": False}
    if not row.get("sha256_ok"):
        return {**res, "status": f"{row.get('status')}: not re-verified"}
    from arithsweep.leaderboard.report import TARGET
    from arithsweep.leaderboard.verify import verify  # torch: only when re-verifying

    target = row.get("target")
    target = float(target) if isinstance(target, int | float) and 0 < target <= 1 else TARGET
    try:
        report = verify(row["checkpoint_path"], target, progress=progress)
    except ArithsweepError as e:
        return {**res, "status": f"error: {e}"}
    res.update(params=report.params, exact_match=report.exact_match,
               n_problems=report.n_problems)
    if report.sha256 != row.get("sha256"):  # changed between the listing and the run
        return {**res, "status": "sha256 mismatch: not recorded"}
    if not report.qualifies:
        return {**res, "status": f"below its target {target:g}: not recorded"}
    entry, created = board.record(report, row.get("id"))
    same = (report.n_failures == row.get("n_failures") and report.params == row.get("params")
            and math.isclose(report.exact_match, row.get("exact_match") or 0, abs_tol=1e-12))
    status = "recorded" + ("" if same else ", measured differently from the published figures")
    return {**res, "status": status, "entry_id": entry["id"], "recorded": True,
            "created": created}
