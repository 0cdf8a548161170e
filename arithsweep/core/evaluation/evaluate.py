"""Exact match, fast: one teacher-forced forward pass per chunk instead of step-by-step decoding.

For an answer of known length, greedy decoding is right exactly when the teacher-forced argmax
is right at every answer position: if every earlier prediction is right, the greedy prefix *is*
the teacher-forced prefix. So exact match over a million problems is a few batched forward
passes. `tests/test_evaluate.py` proves the equivalence problem by problem on trained and
untrained models; greedy decoding stays for `arithsweep ask`, EOS formats and export.

    from arithsweep.core.evaluation.evaluate import exact_match
    ok = exact_match(model, task, *task.enumerate_all())   # (K, N) bool, one row per seed
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from arithsweep.core.data.quirke import classes
from arithsweep.core.data.tasks import OP_NAMES, Task

# tokens per forward pass per member. On a CPU small enough that a chunk's activations stay in
# cache (add10, one thread, a busy 2-core CPU: ~2k problems a chunk, 2**16 tokens, ran ~1.3x
# faster than ~8k, 2**18; ~1k was faster still with one thread, but with two threads on a
# loaded machine each extra chunk costs parallel-region barriers); on a GPU big enough to
# amortise kernel launches.
DEFAULT_CHUNK_TOKENS = 1 << 16
GPU_CHUNK_TOKENS = 1 << 22
# (model, inputs (n, T) uint8, from_pos) -> logits (K, n, T - from_pos, V)
Forward = Callable[[torch.nn.Module, torch.Tensor, int], torch.Tensor]


def _device_of(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def answer_start(task: Task) -> int:
    """First input position that can predict an answer token (fixed when padded)."""
    return task.prompt_len - 1 if task.fmt.pad else 0


def chunk_size(model: torch.nn.Module, task: Task) -> int:
    per = GPU_CHUNK_TOKENS if _device_of(model).type == "cuda" else DEFAULT_CHUNK_TOKENS
    return max(256, per // (task.seq_len * max(1, model.k)))


class EvalSet:
    """Problems encoded once, on the device that scores them, for repeated evaluation (the
    trainer builds one and scores every member on it at each evaluation).

    inputs (N, T-1) uint8, targets (N, L) uint8 and mask (N, L) bool cover only the L input
    positions from `answer_start` on, the ones that can predict an answer token; slot (N, L)
    is each masked position's answer index (0 = first answer token), answer_len elsewhere."""

    def __init__(self, task: Task, a: torch.Tensor, b: torch.Tensor, op: torch.Tensor,
                 device: torch.device | str = "cpu"):
        self.task, self.device, self.n = task, torch.device(device), int(a.numel())
        self.p0 = p0 = answer_start(task)
        parts = []
        for s in _chunks(self.n, 1 << 16):  # bounds encode's int64 scratch
            tokens, mask = task.encode(a[s], b[s], op[s])  # (n, T), (n, T-1)
            parts.append((tokens.to(torch.uint8), mask[:, p0:]))
        tokens = torch.cat([t for t, _ in parts]) if parts else \
            torch.zeros(0, task.seq_len, dtype=torch.uint8)
        mask = torch.cat([m for _, m in parts]) if parts else \
            torch.zeros(0, task.seq_len - 1 - p0, dtype=torch.bool)
        L = task.answer_len
        self.inputs = tokens[:, :-1].contiguous().to(self.device)
        self.targets = tokens[:, p0 + 1:].contiguous().to(self.device)
        # padded formats: every row's answer fills the same positions, so no mask is needed
        self.full = bool(mask.all()) and mask.shape[1] == L
        if self.full:
            self.mask = self.slot = None
            self.seen = torch.full((L,), float(self.n), dtype=torch.float64)
        else:
            slot = torch.where(mask, mask.long().cumsum(-1) - 1, L).clamp(max=L)  # (N, L')
            self.mask, self.slot = mask.to(self.device), slot.to(self.device)
            self.seen = torch.bincount(slot.flatten(), minlength=L + 1)[:L].double()  # (L,)

    @classmethod
    def of(cls, model: torch.nn.Module, task: Task, a, b=None, op=None) -> EvalSet:
        """`a` itself when it is an EvalSet, else (a, b, op) encoded on the model's device."""
        return a if isinstance(a, EvalSet) else cls(task, a, b, op, _device_of(model))


def _passes(model: torch.nn.Module, es: EvalSet, chunk: int | None, positions: bool,
            forward: Forward | None = None):
    """Exact match (K, N) bool on the device, and when `positions`, right answers per answer
    position (K, L) float64 on the device: one teacher-forced pass per chunk, no host sync."""
    model.eval()
    K, L = model.k, es.task.answer_len
    hits = torch.zeros(K, L + 1, dtype=torch.float64, device=es.device) if positions else None
    out = []
    for s in _chunks(es.n, chunk or chunk_size(model, es.task)):
        logits = forward(model, es.inputs[s], es.p0) if forward else \
            model(es.inputs[s], from_pos=es.p0)
        pred = logits.argmax(-1)  # (K, n, L')
        right = pred == es.targets[s]  # (K, n, L')
        if es.full:
            out.append(right.all(-1))
            if hits is not None:
                hits[:, :L] += right.sum(1)
            continue
        mask = es.mask[s]
        out.append((right | ~mask).all(-1))  # (K, n)
        if hits is not None:  # one scatter for every member: (K, n*L') into (K, L+1)
            idx = es.slot[s].flatten().expand(K, -1)
            hits.scatter_add_(1, idx, (right & mask).flatten(1).double())
    ok = torch.cat(out, 1) if out else torch.zeros(K, 0, dtype=torch.bool, device=es.device)
    return ok, (hits[:, :L] if hits is not None else None)


@torch.inference_mode()
def score(
    model: torch.nn.Module, task: Task, a, b: torch.Tensor | None = None,
    op: torch.Tensor | None = None, chunk: int | None = None, forward: Forward | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact match, bool (K, N), and accuracy at each answer position, float (K, answer_len),
    from the same forward passes. Position accuracy shows digits stuck at chance. `a` may be
    an EvalSet (then b and op are not given): no re-encoding. One host transfer at the end.
    `forward(model, inputs, from_pos)`: another computation of the model's logits (training
    in the tiny layout scores with its kernel); verification always uses the model's own."""
    es = EvalSet.of(model, task, a, b, op)
    ok, hits = _passes(model, es, chunk, True, forward)
    return ok.cpu(), (hits.cpu() / es.seen.clamp(min=1)).float()


@torch.inference_mode()
def exact_match(
    model: torch.nn.Module, task: Task, a, b: torch.Tensor | None = None,
    op: torch.Tensor | None = None, chunk: int | None = None, forward: Forward | None = None,
) -> torch.Tensor:
    """Which problems each member gets exactly right: bool (K, N), teacher-forced. `a` may be
    an EvalSet (then b and op are not given). `forward`: as for `score` (the tiny kernel)."""
    return _passes(model, EvalSet.of(model, task, a, b, op), chunk, False, forward)[0].cpu()


def position_accuracy(
    model: torch.nn.Module, task: Task, a: torch.Tensor, b: torch.Tensor, op: torch.Tensor
) -> torch.Tensor:
    """Accuracy at each answer position, float (K, answer_len)."""
    return score(model, task, a, b, op)[1]


@torch.inference_mode()
def greedy_decode(
    model: torch.nn.Module,
    task: Task,
    a: torch.Tensor,
    b: torch.Tensor,
    op: torch.Tensor,
    member: int = 0,
    batch: int = 4096,
) -> list[int | None]:
    """Answers by autoregressive greedy decoding with one member; None where malformed."""
    model.eval()
    dev = _device_of(model)
    prompts = task.encode_prompt(a, b, op)
    answers: list[int | None] = [None] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_len.setdefault(len(p), []).append(i)
    eos = task.vocab.index("<eos>") if "<eos>" in task.vocab else None
    for idxs in by_len.values():
        for s in _chunks(len(idxs), batch):
            rows = idxs[s]
            seq = torch.tensor([prompts[i] for i in rows], dtype=torch.long, device=dev)  # (n, P)
            done = torch.zeros(len(rows), dtype=torch.bool, device=dev)
            gen = []
            for _ in range(task.answer_len):
                nxt = model(seq)[member, :, -1].argmax(-1)  # (n,)
                gen.append(nxt)
                if eos is not None:
                    done |= nxt == eos
                    if bool(done.all()):
                        break
                if seq.shape[1] >= task.n_ctx:
                    break
                seq = torch.cat([seq, nxt[:, None]], dim=1)
            toks = torch.stack(gen, dim=1).tolist()  # (n, L)
            for r, t in zip(rows, toks):
                answers[r] = task.decode_answer(t)
    return answers


def _bucket(keys: torch.Tensor, ok: torch.Tensor, names: list[str]) -> dict[str, tuple[int, int]]:
    n = torch.bincount(keys, minlength=len(names))
    c = torch.bincount(keys, weights=ok.double(), minlength=len(names))
    return {names[i]: (int(n[i]), int(c[i])) for i in range(len(names)) if n[i] > 0}


def breakdown(
    correct: torch.Tensor, task: Task, a: torch.Tensor, b: torch.Tensor, op: torch.Tensor
) -> dict[str, dict[str, tuple[int, int]]]:
    """(problems, correct) by carry class, by operand lengths, by answer length and, for add,
    sub and mix tasks, by Quirke class (S0.., M0.., N1..; see core/data/quirke.py); for mix
    tasks also by operation (add, sub)."""
    correct = correct.cpu()
    cls = task.carry_class(a, b, op).clamp(min=0)
    n_cls = int(cls.max()) + 1 if cls.numel() else 1
    la, lb = task.operand_lengths(a, b)
    nd = task.n_digits
    lens_key = (la - 1) * nd + (lb - 1)
    lens_names = [f"{i // nd + 1}x{i % nd + 1}" for i in range(nd * nd)]
    ans = task.answer(a, b, op).abs()
    ans_len = torch.ones_like(ans)
    biggest, p = (int(ans.max()) if ans.numel() else 0), 10
    while p <= biggest:  # digits of |answer| in exact integer arithmetic (no float logs)
        ans_len += (ans >= p).long()
        p *= 10
    ans_names = [str(i) for i in range(int(ans_len.max()) + 1 if ans.numel() else 2)]
    parts = {
        "by_carry": _bucket(cls, correct, [f"S{i}" for i in range(n_cls)]),
        "by_lengths": _bucket(lens_key, correct, lens_names),
        "by_answer_len": _bucket(ans_len, correct, ans_names),
    }
    if (quirke := classes(task, a, b, op)) is not None:
        parts["by_class"] = _bucket(quirke[0], correct, quirke[1])
    if len(task.op_codes) > 1:  # mix: Quirke reports addition and subtraction apart
        first = task.op_codes[0]  # the codes are consecutive: (0, 1) for mix
        names = [OP_NAMES[c] for c in task.op_codes]
        parts["by_op"] = _bucket(op.cpu() - first, correct, names)
    if getattr(task, "op", None) in ("add", "sub", "mix", "mul"):
        parts["by_special"] = _special(correct, cls, a, b, task.answer(a, b, op), nd)
    return parts


def _special(correct: torch.Tensor, cls: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
             result: torch.Tensor, n_digits: int) -> dict[str, tuple[int, int]]:
    """Natural classes a whole-suite figure can hide (a sub model that answers no problem
    whose result is 0 still scored 99.19%): result 0, an operand of all nines, the longest
    carry chains. Overlapping, unlike the other breakdowns."""
    top = 10**n_digits - 1
    masks = {"result 0": result == 0, "an operand all nines": (a == top) | (b == top),
             "the longest carry chains": cls == (int(cls.max()) if cls.numel() else 0)}
    c = correct.bool()
    return {k: (int(m.sum()), int((m & c).sum())) for k, m in masks.items() if bool(m.any())}
