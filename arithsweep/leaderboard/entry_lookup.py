"""Find a board entry by id, sha256 prefix or published folder name: the local database first,
then the published `leaderboard/entries.json` beside it (weights checked by sha256). `entry_row`
is the one lookup `arithsweep show`, `inspect`, `ood` and `search --from-entry ID_OR_PATH` use
(`board_entry`: with the chain of search commands that led to it, `provenance.entry_chain`);
`smallest_entry` the board's smallest entry of a task, where a new search starts;
`entry_checkpoint` the checkpoint folder `inspect` and `ood` load, `checkpoint_or_entry` the one
`ask`, `finish` and `verify` load, `export_row` the row `export --adderboard` writes. No torch.

Apart from provenance.py so that provenance (read by verify) never imports the published
board, which imports verify to re-verify: the import graph stays a tree.

    from arithsweep.leaderboard.entry_lookup import board_entry, entry_row
    print(board_entry("44")["params"], entry_row("34")["source"])
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from arithsweep.core.errors import ArithsweepError
from arithsweep.leaderboard.provenance import _read, entry_chain, published_entry


def entry_finder(db_url: str | None = None, searches_root: str | Path | None = "searches"):
    """The search's `EntryFinder` (arithsweep.search.driver) over this leaderboard:
    `board_entry` with the database and the searches root fixed. The CLI builds it, so the
    search wing never imports the leaderboard wing."""
    return lambda ref: board_entry(ref, db_url, searches_root)


def smallest_finder(db_url: str | None = None, searches_root: str | Path | None = "searches"):
    """The search's `BoardFinder` (arithsweep.search.driver): `smallest_entry` with the
    database and the searches root fixed, built by the CLI as `entry_finder` is."""
    return lambda task, target: smallest_entry(task, target, db_url, searches_root)


def smallest_entry(task: str, target: float, db_url: str | None = None,
                   searches_root: str | Path | None = "searches") -> dict[str, Any] | None:
    """What a new `arithsweep search --task TASK` starts from: the board's first TASK entry at
    TARGET or above as `arithsweep leaderboard --target TARGET` ranks it (fewest params, then
    the best exact match, then the earliest; the local database and the published
    entries.json beside it in one ranking, a published entry whose weights fail their sha256
    check never ranked), as `board_entry` gives it; None when the board holds none."""
    from arithsweep.leaderboard import published as pub
    from arithsweep.leaderboard.board import open_db

    db = open_db(db_url, create=False)
    try:
        local = db.query(task=task, all=True)
    finally:
        db.close()
    rows = pub.merge(local, pub.published_rows(pub.default_folder(db.url)), task=task,
                     target=target)
    first = next((r for r in rows if r.get("rank") == 1), None)
    # by its full sha256: an id may name another entry in the local database
    return None if first is None else board_entry(first["sha256"], db_url, searches_root)


class NotAnEntry(ArithsweepError):
    """A reference that cannot name an entry: no id, sha256 prefix or published folder name."""


class NoSuchEntry(ArithsweepError):
    """A well-formed reference that neither the local database nor the published index holds;
    `places` names both ("X nor in Y")."""

    def __init__(self, message: str, places: str) -> None:
        super().__init__(message)
        self.places = places


def _key(ref: str) -> str | None:
    """An id (digits) or a sha256 prefix (6-64 hex digits, "sha256:" allowed), lower-cased."""
    key = str(ref).strip().lower().removeprefix("sha256:")
    return key if key.isdigit() or re.fullmatch(r"[0-9a-f]{6,64}", key) else None


def entry_row(ref: str, db_url: str | None = None, what: str | None = None) -> dict[str, Any]:
    """The leaderboard row REF names, as `export --transformer-lens` resolves it: an entry id
    or sha256 prefix the local database holds is its entry (the local database comes first,
    also when the published board has the same id), else one the published entries.json
    beside the database holds, or a published checkpoint folder's name (add3-51-cdd87c29).
    A local row is marked source "local"; a published one source "published" with its
    weights' sha256 checked now (sha256_ok, status: a failing one is returned, never hidden;
    the caller decides), its rank on the board `arithsweep leaderboard` lists, its "seeds
    reached", "retrains" (its arithmetic and commit) and `index` (the entries.json it is in).
    Raises NotAnEntry, NoSuchEntry or an ambiguity (`what` names REF in it), each one line."""
    from arithsweep.leaderboard import published as pub
    from arithsweep.leaderboard.board import open_db

    text = str(ref).strip()
    what = what or repr(text)
    key = _key(text)
    db = open_db(db_url, create=False)
    try:
        local = db.query(all=True)
        row = _pick(what, local, key, db.where) if key else None
    finally:
        db.close()
    if row is not None:
        return pub.as_local([row])[0]
    folder = pub.default_folder(db.url)
    index = f"{pub.label(folder)}/{pub.INDEX}"
    shown = pub.published_rows(folder)
    if key:
        row = _pick(what, shown, key, index)
    else:
        row = next((dict(r) for r in shown if Path(r["checkpoint_path"]).name == text), None)
        if row is None:
            raise NotAnEntry(f"{what} is neither an entry id, a sha256 prefix (6+ hex digits) "
                             "nor a published checkpoint folder's name")
    if row is None:
        raise NoSuchEntry(f"no leaderboard entry {what} in {db.where} nor in {index}",
                          f"{db.where} nor in {index}")
    ranks = {r.get("sha256"): r["rank"] for r in pub.merge(local, shown, all=True)
             if r["source"] == "published"}
    kept = {e["sha256"]: e for e in pub.read_index(folder)}.get(row["sha256"], {})
    return {**row, "rank": ranks.get(row["sha256"]), "seeds_reached": kept.get("seeds_reached"),
            "retrains": kept.get("retrains"), "index": index}


def entry_checkpoint(target: str, db_url: str | None = None) -> tuple[Path, dict | None]:
    """(checkpoint folder, its row or None) for `arithsweep inspect` and `ood`: TARGET itself
    when it exists, else the checkpoint of the entry `entry_row` finds. A published entry
    whose weights fail their sha256 check is refused (one line)."""
    path = Path(target).expanduser()
    if path.exists():
        return path, None
    try:
        row = entry_row(target, db_url)
    except NotAnEntry:
        raise ArithsweepError(f"{target!r} is neither a checkpoint directory nor a leaderboard "
                              "entry (id, sha256 prefix of 6+ hex digits, or a published "
                              "checkpoint folder's name)") from None
    return Path(_usable(row)["checkpoint_path"]), row


def checkpoint_or_entry(ref: str | Path, db_url: str | None = None
                        ) -> tuple[Path, dict | None]:
    """(checkpoint folder, its row or None) for the commands whose argument is a CHECKPOINT
    (`ask`, `finish`, `verify`): REF itself when it exists or names a path (a separator in
    it: the loader's own "no such file" line is the right one for a typo there), else the
    entry a bare id, sha256 prefix or published folder name names, as `entry_checkpoint`
    finds it; a bare word that is none of them is returned as the path it would be."""
    text = str(ref).strip()
    path = Path(text).expanduser()
    if path.exists() or "/" in text or "\\" in text:
        return path, None
    try:
        row = entry_row(text, db_url)
    except NotAnEntry:
        return path, None
    except NoSuchEntry as e:
        raise ArithsweepError(f"{text!r}: no checkpoint folder of that name here, and no "
                              f"leaderboard entry {text} in {e.places}") from None
    return Path(_usable(row)["checkpoint_path"]), row


def export_row(ref: str, db_url: str | None = None) -> dict[str, Any]:
    """The row `arithsweep export REF --adderboard` writes: an entry as `entry_row` finds it
    (local, then published, its weights checked), or for a checkpoint folder the board's entry
    of the same weights (by sha256, local then published) with the folder as its checkpoint,
    else {"id": None, "source": "folder", "checkpoint_path", "sha256"}: a model the board does
    not hold, whose figures the export takes from the weights, unverified."""
    path = Path(str(ref).strip()).expanduser()
    if not path.is_dir():
        return _usable(entry_row(str(ref), db_url))
    from arithsweep.core.hashing import sha256_file

    weights = path / "model.safetensors"
    if not weights.is_file() or not (path / "config.json").is_file():
        raise ArithsweepError(f"{path}: not a checkpoint folder (it needs config.json and "
                              "model.safetensors)")
    sha = sha256_file(weights)
    try:
        row = entry_row(sha, db_url)
    except NoSuchEntry:
        return {"id": None, "source": "folder", "checkpoint_path": str(path), "sha256": sha}
    return {**row, "checkpoint_path": str(path)}  # these weights, wherever the entry keeps its


def _usable(row: dict[str, Any]) -> dict[str, Any]:
    """The row, unless it is a published entry whose weights fail their sha256 check: a model
    that is not the one verified is never loaded as if it were (one line)."""
    if row["source"] == "published" and not row.get("sha256_ok"):
        raise ArithsweepError(f"published entry {row.get('id')}'s weights fail their check "
                              f"({row.get('status')}): {row.get('checkpoint_path')}")
    return row


def board_entry(ref: str, db_url: str | None = None,
                searches_root: str | Path | None = "searches") -> dict[str, Any]:
    """What `arithsweep search --from-entry REF` starts from. A folder: {"checkpoint",
    "chain"} (the search verifies it before it trusts it). Otherwise an entry id or sha256
    prefix, looked up by `entry_row` (the local database, then the published entries.json
    beside it, its weights' sha256 checked): the entry's figures, configs, checkpoint folder,
    seeds and `entry_chain`. Anything else is one ArithsweepError line."""
    text = str(ref).strip()
    what = f"--from-entry {text}"
    path = Path(text).expanduser()
    if text and path.exists():
        return _folder_entry(what, path, searches_root)
    if _key(text) is None:
        raise ArithsweepError(f"{what}: neither a leaderboard entry id, a sha256 prefix (6+ hex "
                              "digits) nor a checkpoint folder")
    try:
        row = entry_row(text, db_url, what)
    except NoSuchEntry as e:
        raise ArithsweepError(f"{what}: no such entry in {e.places}, and no checkpoint folder "
                              "of that name") from None
    if row["source"] == "published":
        if not row.get("sha256_ok"):
            raise ArithsweepError(f"{what}: published entry {row.get('id')}'s weights fail "
                                  f"their check ({row.get('status')})")
        row["checkpoint_path"] = str(Path(row["checkpoint_path"]).absolute())
    meta = (_read(Path(str(row.get("checkpoint_path") or "")) / "config.json") or {}).get("meta")
    meta = meta if isinstance(meta, dict) else {}
    return {"entry_id": row.get("id"), "checkpoint": row.get("checkpoint_path"),
            "source": row.get("source", "local"), "chain": entry_chain(row, searches_root),
            **{k: row.get(k) for k in ("task", "format", "params", "exact_match", "target",
                                       "model_config", "train_config", "search_name",
                                       "trial_id", "sha256")},
            **{k: meta.get(k) for k in ("seeds_reached", "seeds_trained")}}


def _pick(what: str, rows: list[dict[str, Any]], key: str, where: str) -> dict | None:
    """The one row whose id is `key` (digits), else whose sha256 starts with it (6+ hex
    digits, all-digit prefixes too); None if none."""
    hits = [r for r in rows if key.isdigit() and str(r.get("id")) == key]
    if not hits and len(key) >= 6:
        hits = [r for r in rows if str(r.get("sha256") or "").startswith(key)]
    if len({r.get("sha256") for r in hits}) > 1:
        ids = ", ".join(str(r.get("id")) for r in hits)
        raise ArithsweepError(f"{what} is ambiguous in {where} (entries {ids}); give more of "
                              "the sha256")
    return dict(hits[0]) if hits else None


def _folder_entry(what: str, path: Path, searches_root: str | Path | None) -> dict[str, Any]:
    """A checkpoint folder named by --from-entry: checked to be one (the search loads and
    verifies it), with the chain of the search that made it when that is known."""
    from arithsweep.core.hashing import sha256_file

    weights = path / "model.safetensors"
    if not (path / "config.json").is_file() or not weights.is_file():
        raise ArithsweepError(f"{what}: not a checkpoint folder (it needs config.json and "
                              "model.safetensors)")
    meta = (_read(path / "config.json") or {}).get("meta")
    sha = sha256_file(weights)
    kept = published_entry(path, sha)
    name = kept.get("search_name") or (meta.get("search_name") if isinstance(meta, dict)
                                       else None)
    row = {"search_name": name, "checkpoint_path": str(path.absolute()), "sha256": sha}
    return {"checkpoint": str(path.absolute()), "chain": entry_chain(row, searches_root)}
