"""Walk a task name through `arithsweep search` as an architecture review would: the functions
of the arithsweep package that the name, or the Task built from it, passes through.

Runs `arithsweep search` in this process (the `main` that `python -m arithsweep` calls) on a
tiny search (--fresh, one trial of a few steps, every path in a temporary folder) under
`sys.settrace`: this thread and the driver's later threads, not Ray's worker processes. A call
counts when it is a function of the arithsweep package (module bodies and generator resumptions
left out) whose arguments, or locals at any of its returns, hold the task name (an equal str)
or a `Task` (depth 0); depth 1 also looks one level inside (dict values, list/tuple/set items,
attributes, dataclass fields: `opts.task`, `self.task`). Code outside the package is not looked
into. Over the modules of the counted calls in call order: stays (maximal runs in one module),
rooms (distinct modules), returns (stays - rooms), entries per module (its stays); and how many
times `core.data.tasks.get_task` runs at all, and how many Tasks it builds (get_task keeps one
per name and format in a process).

    python scripts/walk_task_name.py [--task add2] [--steps 20] [--depth 1] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import sys
import tempfile
import threading
import types
from collections import Counter
from itertools import groupby
from pathlib import Path

_OPAQUE = (str, bytes, type, types.ModuleType, types.FunctionType, types.MethodType)


class Walk:
    """The global trace function: every arithsweep call in call order, with the least depth
    at which its frame held the task (None: never)."""

    def __init__(self, name: str, task_cls: type) -> None:
        self.name, self.task_cls = name, task_cls
        self.calls: list[list] = []  # [module, qualname, depth or None]
        self.get_task = 0
        self.built = 0  # Tasks (or SortTasks) constructed: __post_init__ runs
        from arithsweep.core.data.sort_task import SortTask

        self.built_types = (task_cls, SortTask)

    def _is(self, v) -> bool:
        return (type(v) is str and v == self.name) or isinstance(v, self.task_cls)

    def _depth(self, values) -> int | None:
        """0: a value is the name or a Task; 1: an item or attribute of a value is; else None."""
        values = list(values)
        if any(self._is(v) for v in values):
            return 0
        for v in values:
            with contextlib.suppress(Exception):  # an object that will not be looked into
                if isinstance(v, dict):
                    v = v.values()
                elif dataclasses.is_dataclass(v) and not isinstance(v, type):
                    v = [getattr(v, f.name, None) for f in dataclasses.fields(v)]
                elif not isinstance(v, (list, tuple, set, frozenset, *_OPAQUE)):
                    v = vars(v).values()
                if any(self._is(x) for x in v):
                    return 1
        return None

    def _mark(self, i: int, frame) -> None:
        d, old = self._depth(frame.f_locals.values()), self.calls[i][2]
        if d is not None and (old is None or d < old):
            self.calls[i][2] = d

    def __call__(self, frame, event, arg):
        if event != "call" or frame.f_trace is not None:  # a generator resumed: already seen
            return None
        code, mod = frame.f_code, frame.f_globals.get("__name__") or ""
        if not (mod == "arithsweep" or mod.startswith("arithsweep.")) or code.co_name == "<module>":
            return None  # not ours: nothing inside it is looked at
        if mod == "arithsweep.core.data.tasks" and code.co_name == "get_task":
            self.get_task += 1
        if code.co_name == "__post_init__" and type(frame.f_locals.get("self")) in self.built_types:
            self.built += 1
        i, name = len(self.calls), code.co_qualname
        if name.startswith("__create_fn__"):  # a dataclass's generated method: name its class
            name = f"{type(frame.f_locals.get('self')).__name__}.{code.co_name}"
        self.calls.append([mod, name, None])
        self._mark(i, frame)
        frame.f_trace_lines = False

        def local(frame, event, arg):
            if event == "return":  # also at each yield of a generator
                self._mark(i, frame)
            return local
        return local

    def figures(self, depth: int) -> dict:
        calls = [(m, f) for m, f, d in self.calls if d is not None and d <= depth]
        stays = [(m, [f for _, f in g]) for m, g in groupby(calls, key=lambda c: c[0])]
        entered = Counter(m for m, _ in stays)
        return {"depth": depth, "calls": len(calls), "stays": len(stays), "rooms": len(entered),
                "returns": len(stays) - len(entered), "entered": dict(entered.most_common()),
                "walk": [{"module": m, "functions": fs} for m, fs in stays]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="add2")
    p.add_argument("--steps", type=int, default=20, help="training steps of the one trial")
    p.add_argument("--trials", type=int, default=1)
    p.add_argument("--depth", type=int, choices=(0, 1), default=1, help="deepest walk listed")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import arithsweep
    from arithsweep.cli.app import main as cli_main
    from arithsweep.core.data.tasks import Task

    with tempfile.TemporaryDirectory(prefix="walk_task_") as tmp:
        argv = ["arithsweep", "search", "--task", a.task, "--fresh", "--trials", str(a.trials),
                "-j", "1", "--trial-steps", str(a.steps), "--name", "walk", "--root",
                f"{tmp}/searches", "--db", f"sqlite:///{tmp}/lb.db", "--mlflow-uri",
                f"sqlite:///{tmp}/mlflow.db", "--json"]
        walk, captured, code = Walk(a.task, Task), io.StringIO(), 0
        old_argv, sys.argv = sys.argv, argv
        threading.settrace(walk)
        sys.settrace(walk)
        try:
            with contextlib.redirect_stdout(captured):
                cli_main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        finally:
            sys.settrace(None)
            threading.settrace(None)
            sys.argv = old_argv
    with contextlib.suppress(ValueError, KeyError, TypeError):
        out = json.loads(captured.getvalue())
        code = f"{code} ({out['n_trials']} proposals trained, {len(out['verified'])} verified)"
    res = {"package": str(Path(arithsweep.__file__).parent),
           "command": " ".join(argv).replace(tmp, "<tmp>"), "exit": code,
           "arithsweep_calls": len(walk.calls), "get_task_runs": walk.get_task,
           "tasks_built": walk.built,
           "by_depth": [walk.figures(d) for d in range(a.depth + 1)]}
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"package {res['package']}\n{res['command']}\n-> exit {code}; {len(walk.calls)} "
          f"arithsweep calls traced; get_task ran {walk.get_task} times, {walk.built} Task built")
    for f in res["by_depth"]:
        print(f"\ndepth {f['depth']}: {f['calls']} calls, {f['stays']} stays in "
              f"{f['rooms']} rooms, {f['returns']} returns\n  entered: "
              + ", ".join(f"{m.removeprefix('arithsweep.')} {n}" for m, n in f["entered"].items()))
        for k, s in enumerate(f["walk"], 1):
            names = Counter(s["functions"])
            print(f"  {k:3d} {s['module'].removeprefix('arithsweep.')}: "
                  + ", ".join(n + (f" x{c}" if c > 1 else "") for n, c in names.items()))


if __name__ == "__main__":
    main()
