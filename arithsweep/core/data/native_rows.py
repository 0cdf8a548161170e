"""The hash sampler's hot rows in C (`hash_rows.c`): the torch ops' integers, in one pass.

On a CPU the training data of a frontier pack (64 seeds x 128 rows, 32 steps a refill) cost
about a sixth of a step as ~100 int64 torch ops over 2-MB tensors, each a pass over memory.
`hash_rows.c` does three of its parts row by row: the candidates of the value and uniform
modes (`hash_sampling._mode_pair` modes 0, 1, 4), the holdout test (`Task._held`) and a pad
format's digits (`encoding.encode_fixed`). Each returns exactly what its torch counterpart
returns (tests/test_native_rows.py), so a run draws the same batches with or without it;
without a C compiler, on a GPU, or with ARITHSWEEP_NATIVE_ROWS=0, the torch ops run.

    from arithsweep.core.data import native_rows
    native_rows.available()   # None, or why the torch ops run
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import torch
from torch import Tensor

from arithsweep.core import native

_SOURCE = Path(__file__).with_name("hash_rows.c")
OFF_ENV = "ARITHSWEEP_NATIVE_ROWS"  # "0": the torch ops (a check, or a machine without cc)
MODES = (0, 1, 4)  # hash_sampling's uniform, values, values of one shared length


def available() -> str | None:
    """None when the C rows are in use, else why not."""
    if os.environ.get(OFF_ENV, "").strip() == "0":
        return f"{OFF_ENV}=0"
    return _native.error()


def usable(*tensors: Tensor) -> bool:
    """The C rows can take these tensors: on the CPU, and the library loaded."""
    return all(t.device.type == "cpu" for t in tensors) and available() is None


def _int64(t: Tensor) -> Tensor:
    return t.to(torch.int64).contiguous()


def draw(key: Tensor, mode: Tensor, cap: Tensor, n_digits: int) -> tuple[Tensor, Tensor]:
    """Operands a, b (N,) of candidate rows, every mode one of MODES (`usable` first)."""
    key, mode, cap = _int64(key), _int64(mode), _int64(cap)
    a, b = torch.empty_like(key), torch.empty_like(key)
    _native.lib.rows_draw(key.numel(), key.data_ptr(), mode.data_ptr(), cap.data_ptr(), n_digits,
                   a.data_ptr(), b.data_ptr())
    return a, b


def held(a: Tensor, b: Tensor, op: Tensor, edges: list[tuple[int, int, int]],
         n_ops: int) -> Tensor:
    """Task._held of (N,) rows: the holdout hash or one of the edge cases (`usable` first)."""
    shape = torch.broadcast_shapes(a.shape, b.shape, op.shape)
    a, b, op = (_int64(x.expand(shape)).view(-1) for x in (a, b, op))
    e = torch.tensor(edges or [(0, 0, 0)], dtype=torch.int64)
    out = torch.empty(a.shape, dtype=torch.uint8)
    _native.lib.rows_held(a.numel(), a.data_ptr(), b.data_ptr(), op.data_ptr(), len(edges),
                   e.data_ptr(), n_ops, out.data_ptr())
    return out.view(shape).bool()


def pick(key0: Tensor, skey: Tensor, B: int, R: int, mode: Tensor, cap: Tensor, n_digits: int,
         op: int, edges: list[tuple[int, int, int]], n_ops: int) -> tuple[Tensor, Tensor, Tensor]:
    """HashSampler._compact's rows for a task of one op code: a, b (N,) and pool (N,) bool,
    True where all R candidates are held out (then a, b are candidate 0's; `usable` first)."""
    key0, skey, mode, cap = _int64(key0), _int64(skey), _int64(mode), _int64(cap)
    a, b = torch.empty_like(key0), torch.empty_like(key0)
    pool = torch.empty(key0.shape, dtype=torch.uint8)
    e = torch.tensor(edges or [(0, 0, 0)], dtype=torch.int64)
    _native.lib.rows_pick(key0.numel(), key0.data_ptr(), skey.data_ptr(), B, R, mode.data_ptr(),
                   cap.data_ptr(), n_digits, op, len(edges), e.data_ptr(), n_ops, a.data_ptr(),
                   b.data_ptr(), pool.data_ptr())
    return a, b, pool.bool()


def encode(parts: list, n_rows: int, seq_len: int) -> Tensor:
    """Tokens (n_rows, seq_len) uint8 of a pad format's row layout `parts` (encode_fixed's:
    a token id, or (x (N,), width, least significant first)), written row by row (`usable`
    first)."""
    nums = [_int64(p[0]) for p in parts if isinstance(p, tuple)]
    prog, j = [], 0
    for p in parts:
        if isinstance(p, tuple):
            prog += [1, j, p[1], int(p[2])]
            j += 1
        else:
            prog += [0, int(p), 1, 0]
    prog_t = torch.tensor(prog, dtype=torch.int32)
    ptrs = (ctypes.c_void_p * max(1, len(nums)))(*[x.data_ptr() for x in nums])
    out = torch.empty((n_rows, seq_len), dtype=torch.uint8)
    _native.lib.rows_encode(n_rows, ptrs, prog_t.data_ptr(), len(parts), out.data_ptr(), seq_len)
    return out


def _declare(lib: ctypes.CDLL) -> None:
    p, i64, i = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.rows_draw.argtypes = [i64, p, p, p, i, p, p]
    lib.rows_held.argtypes = [i64, p, p, p, i, p, i, p]
    lib.rows_encode.argtypes = [i64, p, p, i, p, i64]
    lib.rows_pick.argtypes = [i64, p, p, i64, i, p, p, i, i64, i, p, i, p, p, p]
    for f in (lib.rows_draw, lib.rows_held, lib.rows_encode, lib.rows_pick):
        f.restype = None


# integer code: the bits are the same for every target, -march only speeds it
_native = native.Library(_SOURCE, lambda: ["-O3", "-shared", "-fPIC", f"-march={native.target()}"],
                         "the hash sampler's C rows", _declare)
