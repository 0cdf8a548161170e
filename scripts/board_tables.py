"""The board's figures in README.md and docs/index.md, generated from leaderboard/entries.json.

As the docs' CLI page is generated from the Typer app (docs/gen_cli.py), the tables of the
board that the README and the docs' home page show are generated from what `arithsweep
publish` wrote, so a figure typed by hand cannot drift from the verified one. Each table lies
between `<!-- board:KIND -->` and `<!-- /board -->` in its file; this script rewrites what is
between them. A row links to its entry's section in docs/results.md: the section whose heading
names the entry ("entry 60", "entries 56 and 57") with an `{#anchor}`.

    python scripts/board_tables.py            # rewrite the tables (after `arithsweep publish`)
    python scripts/board_tables.py --check    # exit 1, naming the file, when a table differs

tests/test_docs.py runs the check. No torch: entries.json and two markdown files are read.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENTRIES = ROOT / "leaderboard" / "entries.json"
RESULTS = ROOT / "docs" / "results.md"
# file -> how it links to docs/ from where it lies
FILES = {ROOT / "README.md": "docs/", ROOT / "docs" / "index.md": ""}
_TABLE = re.compile(r"(<!-- board:(\w+) -->\n)(.*?)(<!-- /board -->)", re.S)
# The tasks the README shows every size of: AdderBoard's, which the project measures itself on,
# and at a size where a person's run is best, also the search's own best (what `arithsweep
# search` reaches with no person in the loop); of every other task, the smallest entry.
EVERY_SIZE = ("add10",)
TASKS = {"add10": "add10 (10-digit addition, AdderBoard's task)", "mix3": "mix3 (add and sub)",
         "mix6": "mix6 (add and sub, 6 digits)"}


def _percent(x: float) -> str:
    """As LEADERBOARD.md prints it (rounded down: a model with failures never reads 100%)."""
    sys.path.insert(0, str(ROOT))
    from arithsweep.core.evaluation.stats import percent

    return percent(x)


def sections(results: str) -> dict[int, tuple[str, str]]:
    """Entry id -> (anchor, what the run was) of the docs/results.md section whose heading
    names it: "## add10, 36 p: tbukic's shape at parity with its code (entry 60) {#x}" gives
    60 -> ("x", "tbukic's shape at parity with its code")."""
    out: dict[int, tuple[str, str]] = {}
    for title, anchor in re.findall(r"^##+ (.*?)\s*\{#([\w-]+)\}\s*$", results, re.M):
        what = re.sub(r"\s*\(entr(?:y|ies) [^)]*\)", "", title).split(": ", 1)[-1]
        for names in re.findall(r"entr(?:y|ies) ([\d ,and]+)", title):
            for n in re.findall(r"\d+", names):
                out.setdefault(int(n), (anchor, what))
    return out


def _best(entries: list[dict]) -> list[dict]:
    """One entry per (task, params): the best exact match, as the board ranks a tie."""
    best: dict[tuple, dict] = {}
    for e in sorted(entries, key=lambda e: (e["params"], -e["exact_match"], e["id"])):
        best.setdefault((e["task"], e["params"]), e)
    return list(best.values())


def _how(e: dict, runs: dict[int, tuple[str, str]], docs: str) -> str:
    """How an entry was found: its docs/results.md section (linked), and its search's name."""
    anchor, what = runs.get(e["id"], (None, ""))
    how = f"[{what}]({docs}results.md#{anchor})" if anchor else ""
    if e.get("search_name"):
        how += f"{', ' if how else ''}search `{e['search_name']}`"
    return how


def _seeds(e: dict) -> str:
    return str(e.get("seeds_reached") or "").replace("/", " of ")


def every_size(entries: list[dict]) -> list[dict]:
    """Of the EVERY_SIZE tasks, the best entry of each size, followed at a size where it was
    not found by a search by the best one a search found there."""
    by_search = {(f["task"], f["params"]): f
                 for f in _best([f for f in entries if f.get("search_name")])}
    rows = []
    for e in _best(entries):
        if e["task"] in EVERY_SIZE:
            found = by_search.get((e["task"], e["params"]))
            rows += [e] if e.get("search_name") or found is None else [e, found]
    return rows


def readme_table(entries: list[dict], runs: dict[int, tuple[str, str]], docs: str) -> str:
    rows = every_size(entries)
    smallest: dict[str, dict] = {}
    for e in _best(entries):
        if e["task"] not in EVERY_SIZE:
            smallest.setdefault(e["task"], e)
    rows += sorted(smallest.values(), key=lambda e: e["params"])
    lines = ["| task | params | verified exact match | seeds reached | entry | how it was found |",
             "|---|---:|---|---|---:|---|"]
    named: set[str] = set()
    for e in rows:
        task = e["task"] if e["task"] in named else TASKS.get(e["task"], e["task"])
        named.add(e["task"])
        lines.append(f"| {task} | {e['params']:,} | {_percent(e['exact_match'])} of "
                     f"{e['n_problems']:,} | {_seeds(e)} | {e['id']} | {_how(e, runs, docs)} |")
    return "\n".join(lines) + "\n"


def index_table(entries: list[dict], runs: dict[int, tuple[str, str]], docs: str) -> str:
    """The smallest entry of each task: what the home page shows of the board."""
    smallest: dict[str, dict] = {}
    for e in _best(entries):
        smallest.setdefault(e["task"], e)
    lines = ["| task | params | verified exact match | entry | how it was found |",
             "|---|---:|---|---:|---|"]
    lines += [f"| {e['task']} | {e['params']:,} | {_percent(e['exact_match'])} of "
              f"{e['n_problems']:,} | {e['id']} | {_how(e, runs, docs)} |"
              for e in sorted(smallest.values(), key=lambda e: (e["task"] != "add10",
                                                                 e["params"]))]
    return "\n".join(lines) + "\n"


def rendered(path: Path, entries: list[dict], runs: dict[int, tuple[str, str]]) -> str:
    """The file's text with its board tables generated afresh."""
    make = {"readme": readme_table, "index": index_table}

    def fill(m: re.Match) -> str:
        if m.group(2) not in make:
            raise SystemExit(f"{path}: unknown board table {m.group(2)!r}")
        return m.group(1) + make[m.group(2)](entries, runs, FILES[path]) + m.group(4)

    text = path.read_text(encoding="utf-8")
    if not _TABLE.search(text):
        raise SystemExit(f"{path}: no <!-- board:KIND --> ... <!-- /board --> block")
    return _TABLE.sub(fill, text)


def stale_files() -> list[Path]:
    """The files whose board tables differ from entries.json (what --check reports)."""
    entries = json.loads(ENTRIES.read_text(encoding="utf-8"))["entries"]
    runs = sections(RESULTS.read_text(encoding="utf-8"))
    return [p for p in FILES if rendered(p, entries, runs) != p.read_text(encoding="utf-8")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only say which file differs")
    args = ap.parse_args(argv)
    entries = json.loads(ENTRIES.read_text(encoding="utf-8"))["entries"]
    runs = sections(RESULTS.read_text(encoding="utf-8"))
    stale = stale_files()
    for path in stale:
        if not args.check:
            path.write_text(rendered(path, entries, runs), encoding="utf-8")
        what = "differ from" if args.check else "rewritten from"
        print(f"{path.relative_to(ROOT)}: board tables {what} {ENTRIES.relative_to(ROOT)}",
              file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
