"""Find a board entry for `arithsweep search --from-entry ID_OR_PATH`: the local database first,
then the published `leaderboard/entries.json` (weights checked by sha256), or a checkpoint
folder; with the chain of search commands that led to it (`provenance.entry_chain`).

Apart from provenance.py so that provenance (read by verify) never imports the published
board, which imports verify to re-verify: the import graph stays a tree.

    from arithsweep.leaderboard.entry_lookup import board_entry
    print(board_entry("44")["params"])
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


def board_entry(ref: str, db_url: str | None = None,
                searches_root: str | Path | None = "searches") -> dict[str, Any]:
    """What `arithsweep search --from-entry REF` starts from. A folder: {"checkpoint",
    "chain"} (the search verifies it before it trusts it). Otherwise an entry id or sha256
    prefix, looked up in the local database, then in the published entries.json beside it
    (its weights' sha256 checked): the entry's figures, configs, checkpoint folder, seeds and
    `entry_chain`. Anything else is one ArithsweepError line."""
    text = str(ref).strip()
    what = f"--from-entry {text}"
    path = Path(text).expanduser()
    if text and path.exists():
        return _folder_entry(what, path, searches_root)
    key = text.lower().removeprefix("sha256:")
    if not key.isdigit() and not re.fullmatch(r"[0-9a-f]{6,64}", key):
        raise ArithsweepError(f"{what}: neither a leaderboard entry id, a sha256 prefix (6+ hex "
                              "digits) nor a checkpoint folder")
    from arithsweep.leaderboard.board import open_db
    from arithsweep.leaderboard.published import default_folder, label, published_rows

    db = open_db(db_url, create=False)
    try:
        row = _pick(what, db.query(all=True), key, db.where)
    finally:
        db.close()
    if row is None:
        folder = default_folder(db.url)
        index = f"{label(folder)}/entries.json"
        row = _pick(what, published_rows(folder), key, index)
        if row is None:
            raise ArithsweepError(f"{what}: no such entry in {db.where} nor in {index}, and no "
                                  "checkpoint folder of that name")
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
    """The one row whose id is `key` (digits) or whose sha256 starts with it; None if none."""
    hits = [r for r in rows if (str(r.get("id")) == key if key.isdigit()
                                else str(r.get("sha256") or "").startswith(key))]
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
