"""Looking inside one model: attention, answer probabilities and where its answers go wrong.

The views of APT's README for a trained adder: every head's attention pattern on one problem,
the probability of every vocabulary token at every answer position, the residual stream's norm
after each block, and exact match by answer length / accuracy by answer position over many
held-out problems (all problems for small tasks). `arithsweep inspect` prints and draws them:

    arithsweep inspect runs/add3/best "123+456" --png add3.png
    python -c "from arithsweep.core.model.checkpoint import load_checkpoint as L; \
from arithsweep.core.evaluation.inspect import inspect_problem as I; \
print(I(L('runs/add3/best').model, L('runs/add3/best').task, '123+456')['greedy_answer'])"

Everything is read-only inference; nothing here trains, so reading held-out problems is fine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from arithsweep.core.data.tasks import Task
from arithsweep.core.errors import ConfigError
from arithsweep.core.evaluation.evaluate import breakdown, score

VIEW_SEED = 0x1A5EC7  # the accuracy views' held-out sample; reproducible, trains nothing
_DIGITS = 5  # decimals kept in JSON: enough to see a 0.999 head, small enough to read


def answer_labels(task: Task) -> list[str]:
    """What each answer position holds: 'sign', '10^0' (ones) …; 'token i' when unpadded
    answers vary in length and a position has no fixed meaning."""
    if not task.fmt.pad:
        return [f"token {i}" for i in range(task.answer_len)]
    digits = [f"10^{i}" for i in range(task.n_answer_digits)]
    if not task.fmt.reverse_answer:
        digits.reverse()
    return (["sign"] if task.signed else []) + digits


def _r(values: torch.Tensor) -> list:
    return torch.round(values.double(), decimals=_DIGITS).tolist()


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


@torch.inference_mode()
def inspect_problem(model: torch.nn.Module, task: Task, problem: str,
                    member: int = 0) -> dict[str, Any]:
    """One problem through one member: the greedy answer, then one forward pass over the
    prompt plus that answer (what the model saw while writing it) with attention captured.

    Returns tokens (input token strings), attention [{loop, layer, head, weights (T, T)}],
    answer {labels, chosen, expected, probs (G, V)}, residual_norms [{stage, norms (T,)}],
    greedy_answer, expected_answer, correct. ConfigError if the problem does not fit the task."""
    a, b, op = task.parse_problem(problem)
    if not 0 <= member < model.k:
        raise ConfigError(f"member {member} out of range: this model holds {model.k} "
                          f"(members 0..{model.k - 1})")
    model.eval()
    dev = _device(model)
    prompt = task.encode_prompt([a], [b], [op])[0]
    eos = task.token_id.get("<eos>")
    seq = torch.tensor([prompt], dtype=torch.long, device=dev)  # (1, P)
    gen: list[int] = []
    for _ in range(task.answer_len):  # as evaluate.greedy_decode, for one problem
        nxt = int(model(seq)[member, 0, -1].argmax())
        gen.append(nxt)
        if nxt == eos or seq.shape[1] >= task.n_ctx:
            break
        seq = torch.cat([seq, seq.new_tensor([[nxt]])], dim=1)
    inputs = seq[:, :len(prompt) + len(gen) - 1]  # the last generated token is never an input
    with model.capturing() as cap:
        logits = model(inputs)[member, 0]  # (T, V)
    P, G, T = len(prompt), len(gen), inputs.shape[1]
    probs = logits[P - 1:P - 1 + G].float().softmax(-1)  # (G, V)
    tokens, mask = task.encode([a], [b], [op])
    expected = tokens[0, 1:][mask[0]].tolist()  # the true answer tokens
    n_layers = len(model.layers)
    attention = [
        {"loop": i // n_layers, "layer": i % n_layers, "head": h,
         "weights": _r(p[member, 0, h])}  # (T, T): row = query position, column = key
        for i, p in enumerate(cap["attn"]) for h in range(p.shape[2])
    ]
    stages = ["embed"] + [
        f"L{i % n_layers}" + (f" loop{i // n_layers}" if model.cfg.n_loops > 1 else "")
        for i in range(len(cap["resid"]) - 1)
    ]
    truth = int(task.answer([a], [b], [op])[0])
    greedy = task.decode_answer(gen)
    vocab = list(task.vocab)
    return {
        "task": task.name, "format": task.fmt.name, "problem": task.format_problem(a, b, op),
        "member": member, "vocab": vocab, "prompt_len": P,
        "tokens": [vocab[t] for t in inputs[0].tolist()],
        "n_layers": n_layers, "n_loops": model.cfg.n_loops, "n_heads": model.cfg.n_heads,
        "attention": attention,
        "answer": {
            "labels": answer_labels(task)[:G],
            "chosen": [vocab[t] for t in gen],
            "expected": [vocab[t] for t in expected[:G]] + [None] * (G - len(expected)),
            "probs": _r(probs),  # (G, V): row i is answer position i, columns follow vocab
        },
        "residual_norms": [{"stage": s, "norms": _r(r[member, 0])}
                           for s, r in zip(stages, cap["resid"])],
        "greedy_answer": greedy, "expected_answer": truth, "correct": greedy == truth,
        "seq_len": T,
    }


@torch.inference_mode()
def accuracy_views(model: torch.nn.Module, task: Task, n: int = 10_000, member: int = 0,
                   seed: int = VIEW_SEED) -> dict[str, Any]:
    """Exact match by answer length and accuracy by answer position (plus by carry class) for
    one member, on every problem when the task has at most n, else on n distinct held-out
    problems (uniform operand lengths, so short answers are represented too)."""
    if n < 1:
        raise ConfigError(f"accuracy views need at least 1 problem, got n={n}")
    if not 0 <= member < model.k:
        raise ConfigError(f"member {member} out of range: this model holds {model.k}")
    if task.n_problems <= n:
        a, b, op = task.enumerate_all()
        source = "all problems"
    else:
        gen = torch.Generator().manual_seed(seed)
        a, b, op = task.sample(n, gen, mode="uniform", split="holdout")
        source = f"held-out sample (seed {seed})"
    ok, pos = score(model, task, a, b, op)  # (K, N) bool, (K, L) float
    bd = breakdown(ok[member], task, a, b, op)

    def rows(key: str, name: str) -> list[dict[str, Any]]:
        return [{name: int(k) if k.isdigit() else k, "problems": m, "correct": c,
                 "exact_match": round(c / m, 6)} for k, (m, c) in bd[key].items()]

    labels = answer_labels(task)
    return {
        "problems": int(a.numel()), "source": source,
        "exact_match": round(float(ok[member].double().mean()), 6),
        "by_answer_len": rows("by_answer_len", "answer_len"),
        "by_position": [{"position": i, "label": labels[i], "accuracy": round(float(acc), 6)}
                        for i, acc in enumerate(pos[member].tolist())],
        "by_carry": rows("by_carry", "carry_class"),
    }


def draw(result: dict[str, Any], path: str | Path, views: dict[str, Any] | None = None,
         title: str = "") -> Path:
    """Write `result` (from inspect_problem) and optionally `views` (accuracy_views) as one PNG:
    a grid of attention heatmaps (a row per layer and loop, a column per head; tokens on both
    axes, answer-writing query rows in red), then the answer probabilities (chosen token boxed,
    the true one crossed where they differ), residual norms and the accuracy views."""
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ConfigError(f"{path}: the picture is a PNG; give a path ending in .png")
    import matplotlib

    matplotlib.use("Agg", force=True)  # never try to open a window
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    toks, P, vocab = result["tokens"], result["prompt_len"], result["vocab"]
    T, H, ans = len(toks), result["n_heads"], result["answer"]
    rows = len(result["attention"]) // H
    n_low = 2 if views is None else 4
    width = max(H * (0.17 * T + 1.0), 3.3 * n_low)  # inches: every token label must fit
    side = min(width / H, 5.0)  # few heads: bigger panels rather than wide gaps
    fig = plt.figure(figsize=(width, rows * side + 4.2), dpi=110, layout="constrained")
    top, low = fig.subfigures(2, 1, height_ratios=[rows * side, 3.4])
    axes = top.subplots(rows, H, squeeze=False)
    for att in result["attention"]:
        ax = axes[att["loop"] * result["n_layers"] + att["layer"]][att["head"]]
        im = ax.imshow(att["weights"], cmap="Blues", vmin=0.0, vmax=1.0)
        loop = f" · loop {att['loop']}" if result["n_loops"] > 1 else ""
        ax.set_title(f"layer {att['layer']}{loop} · head {att['head']}", fontsize=9)
        ax.set_xticks(range(T), toks, fontsize=7)
        ax.set_yticks(range(T), toks, fontsize=7)
        for i, tick in enumerate(ax.get_yticklabels()):
            if i >= P - 1:  # these query positions write the answer
                tick.set_color("#c5221f")
        ax.set_xlabel("key (attended to)", fontsize=7)
        if att["head"] == 0:
            ax.set_ylabel("query (red: writes an answer token)", fontsize=7)
    # panchor=False: the default anchors the heads against the colorbar, leaving a gap at left
    top.colorbar(im, ax=axes, shrink=0.7, label="attention weight", panchor=False)

    lax = low.subplots(1, n_low)
    ax = lax[0]
    ax.imshow(ans["probs"], cmap="Greens", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(vocab)), [v.replace("<eos>", "$").replace("<pad>", "_")
                                      for v in vocab], fontsize=7)
    ax.set_yticks(range(len(ans["labels"])), [f"{lab}: {c}" for lab, c in
                                              zip(ans["labels"], ans["chosen"])], fontsize=7)
    for i, (c, e) in enumerate(zip(ans["chosen"], ans["expected"])):
        j = vocab.index(c)
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=1.5,
                               ec="#1a73e8" if c == e else "#c5221f"))
        pij = ans["probs"][i][j]
        ax.text(j, i, f"{pij:.2f}", ha="center", va="center", fontsize=6,
                color="white" if pij > 0.5 else "black")  # readable on dark cells
        if e is not None and e != c:
            ax.plot(vocab.index(e), i, "x", color="#c5221f", ms=7)
    ax.set_title("answer probabilities\n(box: chosen, x: true token)", fontsize=9)

    ax = lax[1]
    for res in result["residual_norms"]:
        ax.plot(range(T), res["norms"], marker=".", label=f"after {res['stage']}")
    ax.axvline(P - 1.5, color="#9aa0a6", ls=":", lw=1)  # prompt | answer
    ax.set_xticks(range(T), toks, fontsize=7)
    ax.set_title("residual stream norm per position", fontsize=9)
    ax.legend(fontsize=6)
    if views is not None:
        pos, lens = views["by_position"], views["by_answer_len"]
        n = max(1, int(views["problems"]))
        _error_rates(lax[2], [p["label"] for p in pos], [p["accuracy"] for p in pos], n,
                     "error rate by answer position", "#1a73e8")
        lax[2].tick_params(axis="x", labelsize=6, rotation=60)
        _error_rates(lax[3], [str(r["answer_len"]) for r in lens],
                     [r["exact_match"] for r in lens], n, "error rate by answer length",
                     "#188038", [r["problems"] for r in lens])
        lax[3].set_xlabel("answer digits", fontsize=7)
    verdict = "right" if result["correct"] else "WRONG"
    lines = [title or f"{result['task']} · member {result['member']}",
             f"{result['problem']} = {result['expected_answer']} · model says "
             f"{result['greedy_answer']} ({verdict}; tokens {''.join(ans['chosen'])})"]
    if views is not None:
        lines[1] += (f" · exact match {views['exact_match']:.4f} on {views['problems']:,} "
                     f"problems ({views['source']})")
    fig.suptitle("\n".join(lines), fontsize=10,
                 color="#188038" if result["correct"] else "#c5221f")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def _error_rates(ax, labels: list[str], accuracy: list[float], n: int, title: str, color: str,
                 counts: list[int] | None = None) -> None:
    """1 - accuracy on a log scale: 99.3% and 100% look the same on a 0-1 axis, here they are
    two decades apart. No error at all sits on a floor below 1/n, marked 0."""
    floor = 0.3 / n
    errs = [max(1.0 - a, floor) for a in accuracy]
    ax.semilogy(range(len(labels)), errs, marker="o", ls="", color=color)
    ax.set_xticks(range(len(labels)), labels)
    ax.axhline(0.01, color="#d93025", lw=0.8, ls="--")  # the 99% target
    ax.set_ylim(floor / 2, 1.5)
    for i, e in enumerate(errs):
        if e == floor:
            ax.text(i, floor * 1.3, "0", ha="center", va="bottom", fontsize=6)
        if counts is not None:
            ax.text(i, 1.1, f"n={counts[i]:,}", ha="center", va="top", fontsize=5, rotation=90)
    ax.set_title(f"{title}\n(log; dashed: 1% = the 99% target)", fontsize=9)
