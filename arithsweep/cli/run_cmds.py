"""Single-run commands: `train`, `ask`, `params`, `bench` (torch is imported inside each).

    arithsweep train --task add3
    arithsweep ask runs/add3 "123+456"
    arithsweep params --task add10 --d-model 7 --heads 1 --d-ff 14
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from arithsweep.cli.common import (
    DB_HELP,
    ENTRY_TOO,
    FORMAT_HELP,
    SET_HELP,
    TASK_HELP,
    check_outputs,
    err,
    model_overrides,
    out,
    print_json,
    table,
)
from arithsweep.core.config import ModelConfig, TrainConfig
from arithsweep.core.errors import ArithsweepError, ConfigError


def train(
    task: str = typer.Option(None, "--task", "-t", help=TASK_HELP),
    fmt: str = typer.Option(None, "--format", help=FORMAT_HELP),
    config: Path = typer.Option(None, "--config", "-c", help="YAML/JSON with model:/train: sections, or a checkpoint's config.json"),
    d_model: int = typer.Option(None, "--d-model", help=f"residual width (default {ModelConfig.d_model})"),
    layers: int = typer.Option(None, "--layers", help=f"transformer blocks (default {ModelConfig.n_layers})"),
    heads: int = typer.Option(None, "--heads", help=f"attention heads (default {ModelConfig.n_heads})"),
    d_ff: int = typer.Option(None, "--d-ff", help=f"MLP width, 0 = no MLP (default {ModelConfig.d_ff})"),
    pos: str = typer.Option(None, "--pos", help=f"learned | sinusoidal | rope | abacus | abacus_rope | abacus_bias | digit_index | none (default {ModelConfig.pos})"),
    seeds: int = typer.Option(None, "--seeds", "-k", help=f"seeds trained together (default {TrainConfig.seeds})"),
    steps: int = typer.Option(None, "--steps", help=f"optimiser steps (default {TrainConfig.steps})"),
    lr: float = typer.Option(None, "--lr", help=f"peak learning rate (default {TrainConfig.lr:g})"),
    seed: int = typer.Option(None, "--seed", help=f"first seed of the pack (default {TrainConfig.seed})"),
    target: float = typer.Option(None, "--target", help=f"stop once a seed reaches this exact match (default {TrainConfig.target:g})"),
    device: str = typer.Option(None, "--device", help=f"auto | cpu | cuda | cuda:N (default {TrainConfig.device})"),
    layout: str = typer.Option(None, "--layout", help=f"auto | reference | tiny: how a step computes its gradients (default {TrainConfig.layout}: picks by model; docs/training.md#layouts)"),
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    out_dir: Path = typer.Option(None, "--out", "-o", help="checkpoint directory (default runs/<task>-<time>)"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
    log: Path = typer.Option(None, "--log", help="append one line per evaluation to this file (runs in the background); --resume goes on with the run's own"),
    resume: Path = typer.Option(None, "--resume", help="continue the killed run in this folder (its --out) from its last training state; it ends as if never stopped"),
    init_from: Path = typer.Option(None, "--init-from", help=f"start every seed from this checkpoint's weights instead of a fresh initialisation (continue a near miss on a new schedule; same architecture and format): a checkpoint or training-state folder, {ENTRY_TOO}"),
    db: str = typer.Option(None, "--db", help=f"{DB_HELP}; where --init-from looks an entry up"),
) -> None:
    """Train K seeds of one architecture together; save the best as a checkpoint. The run's
    whole state is saved as it trains (every checkpoint_every steps, or else about every
    checkpoint_seconds: both --set fields), so a killed run continues with --resume. An
    option not given takes the --config file's value, else the default shown."""
    check_outputs(dirs={"--out": out_dir, "--resume": resume}, appends={"--log": log})
    import time

    from arithsweep.core.overrides import build_configs

    if init_from is not None:  # a bare entry id or published folder name: its checkpoint
        from arithsweep.leaderboard.entry_lookup import checkpoint_or_entry

        init_from = checkpoint_or_entry(init_from, db)[0]

    over = model_overrides(sets, d_model=d_model, n_layers=layers, n_heads=heads, d_ff=d_ff,
                            pos=pos, seeds=seeds, steps=steps, lr=lr, seed=seed,
                            target=target, device=device, layout=layout,
                            init_from=init_from and str(init_from.resolve()))
    if resume is not None:
        given = [n for n, v in (("--task", task), ("--format", fmt), ("--config", config),
                                ("--out", out_dir)) if v is not None] + [f"--{k}" for k in over]
        if given:
            raise ArithsweepError(f"--resume continues a run with its own configuration; "
                                  f"drop {', '.join(given)}")
        from arithsweep.core.api import AlreadyFinished, resume_job

        try:
            res = resume_job(resume, progress=not as_json, log=log)
        except AlreadyFinished as done:
            print(str(done), file=sys.stderr)  # one line, however narrow the terminal
            return
        from arithsweep.core.config import TrainConfig

        tc = TrainConfig.from_dict(res["train"])
    else:
        t, m, tc = build_configs(task, fmt, config, over)
        from arithsweep.core.api import train_job

        dest = out_dir or Path("runs") / f"{t.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        res = train_job(t, m, tc, dest, progress=not as_json, log=log)
    if as_json:
        return print_json(res)
    tab = table(f"{res['task']} · {res['architecture']}", ("seed", "eval exact match", ""))
    for i, e in enumerate(res["seed_exact_match"]):
        mark = "best" if tc.seed + i == res["best_seed"] else (
            "failed (NaN)" if i in res["failed_seeds"] else "")
        tab.add_row(str(tc.seed + i), f"{e:.4f}", mark)
    out.print(tab)
    ok = "[green]reached[/]" if res["reached_target"] else "[red]below[/]"
    out.print(
        f"parameters [bold]{res['params']}[/] · best seed {res['best_seed']} exact match "
        f"[bold]{res['final_exact_match']:.5f}[/] on {res['final_problems']} ({ok} target "
        f"{res['target']}) · {res['steps']} steps ({res['stop_reason']}) · "
        f"train {res['train_seconds']}s + full checks {res['check_seconds']}s · "
        f"{res['examples_per_s']:,} examples/s on {res['device']}, layout {res['layout']} ({res['layout_why']})\n"
        f"checkpoint {res['checkpoint']}"
    )


def finish(
    checkpoint: Path = typer.Argument(..., help=f"checkpoint directory of a near miss, {ENTRY_TOO}"),
    out_dir: Path = typer.Option(..., "--out", "-o", help="where the finished checkpoint goes"),
    sets: list[str] = typer.Option(None, "--set", help="finisher fields, e.g. --set finish_rounds=3 --set finish_cmaes_evals=2000 (the checkpoint's own train config otherwise)"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Finish a near miss: targeted fine-tuning on its errors mined from the training split,
    and/or a CMA-ES polish, each kept only if held-out exact match improves."""
    check_outputs(dirs={"--out": out_dir})
    from arithsweep.core.api import finish_job
    from arithsweep.core.overrides import parse_sets
    from arithsweep.leaderboard.entry_lookup import checkpoint_or_entry

    res = finish_job(checkpoint_or_entry(checkpoint, db)[0], out_dir, parse_sets(sets))
    if as_json:
        return print_json(res)
    for r in res["finishers"]:
        out.print(f"{r['finisher']}: held-out {r['held_out_before']:.4f} -> "
                  f"{r.get('held_out_after', r['held_out_before']):.4f}, "
                  f"{'kept' if r['kept'] else 'not kept'}", highlight=False)
    ok = "[green]reached[/]" if res["reached_target"] else "[red]below[/]"
    out.print(f"{res['task']} · {res['params']} parameters · {res['final_before']:.5f} -> "
              f"[bold]{res['final_exact_match']:.5f}[/] on {res['final_problems']} ({ok} "
              f"target {res['target']}) · finished by {res['finished_by'] or 'none'}\n"
              f"checkpoint {res['checkpoint']}")


def ask(
    checkpoint: Path = typer.Argument(..., help=f"checkpoint directory, {ENTRY_TOO}"),
    problems: list[str] = typer.Argument(None, help='problems such as "123+456"'),
    file: Path = typer.Option(None, "--file", "-f", help="a file with one problem per line"),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Ask a trained model arithmetic questions (greedy decoding)."""
    items = list(problems or [])
    if file is not None:
        if not file.is_file():
            raise ArithsweepError(f"--file {file}: no such file")
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            why = "not UTF-8 text" if isinstance(e, UnicodeDecodeError) else e.strerror
            raise ArithsweepError(f"--file {file}: cannot read it ({why})") from None
        items += [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not items:
        raise ArithsweepError('no problems given: e.g. arithsweep ask CHECKPOINT "123+456"')
    from arithsweep.core.api import ask_job
    from arithsweep.leaderboard.entry_lookup import checkpoint_or_entry

    res = ask_job(checkpoint_or_entry(checkpoint, db)[0], items)
    if as_json:
        return print_json(res)
    tab = table(f"{res['task']} · {res['params']} parameters", ("problem", "model", "true", ""))
    for r in res["results"]:
        tab.add_row(r["problem"], str(r["answer"]), str(r["expected"]),
                    "[green]right[/]" if r["correct"] else "[red]wrong[/]")
    out.print(tab)
    out.print(f"{res['correct']}/{res['total']} right")


def params(
    file: Path = typer.Argument(None, show_default=False, metavar="FILE",
                                help="a config file, as --config (recipes/anchors/*.yaml)"),
    task: str = typer.Option(None, "--task", "-t", help=TASK_HELP),
    fmt: str = typer.Option(None, "--format", help=FORMAT_HELP),
    config: Path = typer.Option(None, "--config", "-c", help="YAML/JSON with a model: section"),
    d_model: int = typer.Option(None, "--d-model"),
    layers: int = typer.Option(None, "--layers"),
    heads: int = typer.Option(None, "--heads"),
    d_ff: int = typer.Option(None, "--d-ff"),
    pos: str = typer.Option(None, "--pos"),
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Unique parameter count of an architecture, per component, without training."""
    from arithsweep.core.overrides import build_configs

    if file is not None and config is not None and file != config:
        raise ConfigError(f"two config files given ({file} and --config {config}): give one")
    config = config or file

    over = model_overrides(sets, d_model=d_model, n_layers=layers, n_heads=heads, d_ff=d_ff,
                            pos=pos)
    t, m, _ = build_configs(task, fmt, config, over)
    from arithsweep.core.api import params_job

    res = params_job(t, m)
    if as_json:
        return print_json(res)
    tab = table(f"{res['task']} · {res['architecture']}", ("component", "params"),
                right={"params"})
    for row in res["breakdown"]:
        tab.add_row(row["component"], str(row["params"]))
    tab.add_row("[bold]total (unique)[/]", f"[bold]{res['params']}[/]")
    out.print(tab)
    out.print(f"vocab {res['vocab_size']} ({' '.join(res['vocab'])}) · context {res['n_ctx']}")


def bench(
    quick: bool = typer.Option(False, "--quick", help="fewer steps (a smoke run, noisier ratios)"),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Packed vs sequential training throughput, tiny-model layouts against a plain PyTorch
    loop, and exact-match throughput, as ratios measured in one run."""
    if device not in ("auto", "cpu", "cuda"):
        raise ArithsweepError(f"--device {device!r}: expected auto, cpu or cuda")
    from arithsweep.core.bench import run_bench

    res = run_bench(quick=quick, device=device, log=None if as_json else err.print)
    if as_json:
        return print_json(res)
    tab = table(f"packed training, {res['model']} on {res['task']} ({res['device']})",
                ("K", "packed ex/s", "sequential ex/s", "packed / sequential"), right=True)
    for r in res["packing"]:
        tab.add_row(str(r["k"]), f"{r['packed_ex_s']:,.0f}", f"{r['sequential_ex_s']:,.0f}",
                    f"[bold]{r['ratio']:.2f}x[/]")
    out.print(tab)
    e = res["exact_match"]
    out.print(f"exact match on {e['problems']:,} {res['task']} problems ({e['params']} params): "
              f"{e['seconds']:.2f}s = {e['problems_per_s']:,.0f}/s teacher-forced; greedy decoding "
              f"{e['greedy_per_s']:,.0f}/s ({e['speedup']:.1f}x slower)")
    if res.get("cuda"):
        gpu = res["cuda"][0]["gpu"]
        tab = table(f"CUDA training, {res['model']} on {res['task']} ({gpu})",
                    ("K", "step", "attention", "examples/s", "GPU busy", "vs default at K=1024"),
                    right=True)
        for r in res["cuda"]:
            util = "n/a" if r["gpu_util"] is None else f"{r['gpu_util']:.0f}%"
            tab.add_row(str(r["k"]), r["step"], r["attention"], f"{r['examples_per_s']:,.0f}",
                        util, f"{r['vs_default_k1024']:.2f}x")
        out.print(tab)
    tab = table("tiny models (add10, batch 256 a seed): training layouts side by side",
                ("model", "layout", "examples/s", "vs 1 seed", "vs best reference",
                 "vs plain loop"), right=True)
    for r in res.get("tiny", []):
        ratio = [f"{r[k]:.2f}x" if r.get(k) else "-"
                 for k in ("vs_1_seed", "vs_best_reference", "vs_plain")]
        name = r["layout"] + (f" -> {r['used']}" if r["layout"].startswith("default") else "")
        tab.add_row(f"{r['model']} ({r['params']} p)", name, f"{r['examples_per_s']:,.0f}",
                    *ratio)
    out.print(tab)
    if res.get("tiny_crossover"):
        tab = table("one-block add10 models, 8 seeds: where the tiny layout stops paying",
                    ("parameters", "d_model", "reference ex/s", "tiny ex/s", "tiny / reference"),
                    right=True)
        for r in res["tiny_crossover"]:
            tab.add_row(f"{r['params']:,}", str(r["d_model"]), f"{r['reference']:,.0f}",
                        f"{r['tiny']:,.0f}", f"{r['tiny_vs_reference']:.2f}x")
        out.print(tab)
