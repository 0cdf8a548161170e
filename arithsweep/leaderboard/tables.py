"""The leaderboard's rows as strings: JSON, CSV and a markdown table (`arithsweep leaderboard
--json/--csv/--markdown`, `export`), and the cells of the Rich table the CLI prints. No torch:
the fast `arithsweep leaderboard` path imports it.

    python -c "from arithsweep.leaderboard.board import open_db; \\
        from arithsweep.leaderboard.tables import to_markdown; \\
        print(to_markdown(open_db(create=False).query()))"
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from arithsweep.core.evaluation.stats import percent

# Columns of every human-facing table (markdown, Rich); `cells` renders one row.
COLUMNS = ("rank", "task", "params", "exact match", "nines", "problems checked",
           "architecture", "date", "entry id")  # fmt: skip

# Flat columns for CSV (spreadsheets); the nested failures and breakdown live in the JSON.
CSV_FIELDS = (
    "rank", "id", "task", "format", "params", "exact_match", "nines", "wilson_lower",
    "n_problems", "n_failures", "target", "architecture", "suite", "suite_seed", "suite_size",
    "sha256", "checkpoint_path", "mlflow_run_id", "search_name", "trial_id", "seed", "steps",
    "wall_time", "device", "version", "created_at", "verified_at", "reproduce",
    "model_config", "train_config",
)  # fmt: skip

RIGHT_ALIGNED = {"rank", "params", "exact match", "nines", "problems checked", "entry id"}


def _date(row: dict[str, Any]) -> str:
    return str(row.get("created_at") or "")[:10]  # ISO-8601: the date is the first 10 chars


def _count(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else ""


def cells(row: dict[str, Any]) -> list[str]:
    return [
        "" if row.get("rank") is None else str(row["rank"]),
        str(row.get("task", "")),
        str(row.get("params", "")),
        percent(row.get("exact_match")),
        str(row.get("nines", "")),
        _count(row.get("n_problems")),
        str(row.get("architecture") or ""),
        _date(row),
        str(row.get("id", "")),
    ]


def to_json(rows: list[dict[str, Any]]) -> str:
    """All fields of every row (nested configs and breakdowns included), indented JSON."""
    return json.dumps(list(rows), indent=2, default=str)


def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        flat = {k: row.get(k) for k in CSV_FIELDS}
        for k in ("model_config", "train_config"):
            flat[k] = json.dumps(row.get(k) or {}, sort_keys=True)
        writer.writerow(flat)
    return buf.getvalue()


def _md_escape(cell: str) -> str:
    return cell.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(columns: tuple[str, ...], body: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(columns) + " |",
           "|" + "|".join("---:" if c in RIGHT_ALIGNED else "---" for c in columns) + "|"]
    return out + ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in body]


def to_markdown(rows: list[dict[str, Any]], title: str | None = None) -> str:
    """A GitHub-flavoured markdown table (right-aligned numbers), optionally under a heading."""
    out = [f"## {title}", ""] if title else []
    if not rows:
        return "\n".join([*out, "_No verified entries yet._", ""])
    return "\n".join(out + _md_table(COLUMNS, [cells(row) for row in rows])) + "\n"

