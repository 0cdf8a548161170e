"""How a problem becomes tokens: the encoders behind `Task.encode` (core/data/tasks.py).

A pad format puts every number at the same columns in every row, so each number's digits are
written in one copy (`encode_fixed`); a nopad format gives each row its own lengths, so each
token is scattered to its row's position (`encode_scattered`). Both take the task, the
operands and the answers (N,) and write the task's layout (`formats.layout_places`).

    from arithsweep.core.data.tasks import get_task
    print(get_task("add3").encode(*get_task("add3").sample(2, torch.Generator()))[0])
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from arithsweep.core.data import native_rows
from arithsweep.core.data.sampling import _digit_table, _digits, _num_digits

_OP_SYMBOL = "+-*"  # indexed by op code
_ENCODE_ROWS = 1 << 13  # rows per digit table in a CPU encode (under 1 MB of float64 for add10)


def encode_scattered(task: Any, a: Tensor, b: Tensor, op: Tensor, r: Tensor,
                     dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """A nopad format's tokens (N, seq_len), prompt end (N,), answer end (N,); `r` (N,) the
    answers."""
    # nopad: every row's numbers have their own lengths, so each token is scattered per row
    big, dev, ids, f, seq = a.shape[0], a.device, task.token_id, task.fmt, task.seq_len
    out = torch.full((big, seq + 1), task.pad_id, dtype=torch.int64, device=dev)
    pos = torch.zeros(big, dtype=torch.int64, device=dev)  # (N,) next free position

    def put(tok: Tensor | int) -> None:
        out.scatter_(1, pos[:, None], torch.as_tensor(tok, device=dev).expand(big)[:, None])
        pos.add_(1)

    def put_number(x: Tensor, width: int, lsd_first: bool) -> None:
        length = _num_digits(x)
        j = torch.arange(width, device=dev).expand(big, width)  # (N, W)
        src = j if lsd_first else (length[:, None] - 1 - j).clamp(min=0)
        # digits beyond a row's length land in the spare last column, cut off below
        dst = torch.where(j < length[:, None], pos[:, None] + j, seq)
        out.scatter_(1, dst, _digits(x, width).gather(1, src))
        pos.add_(length)

    op_tok = torch.tensor([ids.get(s, -1) for s in _OP_SYMBOL], device=dev)[op]
    put_number(a, task.n_digits, f.reverse_operands)
    if f.delimiters or task.op == "mix":
        put(op_tok)
    put_number(b, task.n_digits, f.reverse_operands)
    if f.delimiters:
        put(ids["="])
    prompt_end = pos.clone()
    if task.signed:
        put(torch.where(r < 0, ids["-"], 0))
    put_number(r.abs(), task.n_answer_digits, f.reverse_answer)
    put(ids["<eos>"])
    return out[:, :seq].to(dtype), prompt_end, pos


def encode_fixed(task: Any, a: Tensor, b: Tensor, op: Tensor, r: Tensor,
                 dtype: torch.dtype) -> Tensor:
    """Tokens (N, seq_len) of a pad format, whose layout is the same for every row: each
    number's digits go to their columns in one copy, no per-row scatter; `r` (N,) the
    answers."""
    ids, f, n, big = task.token_id, task.fmt, task.n_digits, a.shape[0]
    # the row's layout, left to right: a token (an int, or a tensor of one per row) in one
    # column, or a number (x, width, least significant digit first) in `width` columns
    parts: list[Tensor | int | tuple[Tensor, int, bool]] = []
    zeros = f.zero_delimiters
    if zeros:
        parts.append(0)
    parts.append((a, n, f.reverse_operands))
    if zeros:
        parts.append(0)
    elif f.delimiters or task.op == "mix":
        codes = torch.tensor([ids.get(s, -1) for s in _OP_SYMBOL], device=a.device)
        parts.append(torch.take(codes, op))  # take, not codes[op]: see sampling._pow10
    if zeros:
        parts.append(0)
    parts.append((b, n, f.reverse_operands))
    if f.delimiters:
        parts.append(0 if zeros else ids["="])
    if task.signed:
        parts.append(torch.where(r < 0, ids["-"], 0))
    parts.append((r.abs(), task.n_answer_digits, f.reverse_answer))
    assert sum(p[1] if isinstance(p, tuple) else 1 for p in parts) == task.seq_len
    if (dtype == torch.uint8 and native_rows.usable(a)  # the training batches' case, in C
            and not any(isinstance(p, Tensor) for p in parts)):
        return native_rows.encode(parts, big, task.seq_len)
    out = torch.empty((big, task.seq_len), dtype=dtype, device=a.device)
    # CPU: in row blocks, so the float64 digit tables stay small enough for the allocator
    # to reuse; whole-batch ones get fresh pages every call, and the page faults cost more
    rows = _ENCODE_ROWS if a.device.type == "cpu" else max(1, big)
    col = 0
    for p in parts:
        if not isinstance(p, tuple):
            out[:, col] = p
            col += 1
            continue
        x, width, lsd_first = p
        for lo in range(0, big, rows):
            hi = min(big, lo + rows)
            out[lo:hi, col:col + width] = _digit_table(x[lo:hi], width, lsd_first)
        col += width
    return out
