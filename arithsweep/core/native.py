"""The project's small C helpers: built on first use by the system C compiler, cached, loaded.

Four sources use it: the tiny layout's training kernel, optimiser tail and ties
(`core/model/tiny_kernel.c`, `tiny_step.c`, `tiny_ties.c`) and the hash sampler's rows
(`core/data/hash_rows.c`). Each is plain C with no Python or torch headers,
compiled once per machine and CPU kind into ~/.cache/arithsweep/kernels (or $ARITHSWEEP_CACHE)
and loaded with ctypes; without a compiler its caller says why and uses its torch path.

    from arithsweep.core.native import Library
    helper = Library(path_to_c_source, lambda: ["-O3", "-shared", "-fPIC"], "the helper",
                     declare=lambda lib: None)   # declare: its functions' argtypes
    helper.error() or helper.lib.some_function(...)
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

# The instruction set the C helpers are built for (gcc/clang -march): `native` by default, or
# a fixed level such as x86-64-v3 to reproduce another machine's build (docs/training.md,
# "Where the same seed gives the same weights"). Read when a library loads.
TARGET_ENV = "ARITHSWEEP_KERNEL_TARGET"
_TARGET_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def target() -> str:
    """The -march the C helpers are (or would be) built for: $ARITHSWEEP_KERNEL_TARGET or
    native."""
    return os.environ.get(TARGET_ENV, "").strip() or "native"


def target_error() -> str | None:
    """Why $ARITHSWEEP_KERNEL_TARGET cannot be a -march, or None."""
    if not _TARGET_OK.fullmatch(target()):
        return f"{TARGET_ENV}={target()!r} is not an instruction set name"
    return None


def compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _cache_dir() -> Path:
    root = os.environ.get("ARITHSWEEP_CACHE") or Path.home() / ".cache" / "arithsweep"
    return Path(root) / "kernels"


def _cpu_flags() -> str:
    # -march=native code is only valid on the CPU it was built for: a cluster sharing a home
    # directory gets one build per CPU kind
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def library_path(source: Path, cc: str, flags: list[str]) -> Path:
    """Where the build of `source` by compiler `cc` with `flags` is cached. The key holds the
    source, the compiler and its version, the flags (the target among them) and the CPU's
    own flags: a native build is only valid on its CPU kind, and a build for a fixed target
    is kept beside the native one, never taken for it."""
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60)
    key = hashlib.sha256(source.read_bytes() + " ".join(
        [cc, version.stdout.split("\n")[0], *flags, _cpu_flags()]).encode()).hexdigest()
    return _cache_dir() / f"{source.stem}-{key[:16]}.so"


def compile_library(source: Path, flags: list[str], what: str,
                    ) -> tuple[ctypes.CDLL | None, str | None]:
    """(the loaded library, None), or (None, why not) in one line naming `what` (the tiny
    kernel, ...): no compiler, a build that failed."""
    cc = compiler()
    if cc is None:
        return None, f"no C compiler (cc) to build {what}"
    try:
        so = library_path(source, cc, flags)
        if not so.exists():
            so.parent.mkdir(parents=True, exist_ok=True)
            # built beside its final name, then renamed: trials starting together on one
            # machine never load a half-written library
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=so.parent)
            os.close(fd)
            try:
                run = subprocess.run([cc, *flags, "-o", tmp, str(source), "-lm"],
                                     capture_output=True, text=True, timeout=300)
                if run.returncode:
                    last = (run.stderr.strip().splitlines() or ["?"])[-1]
                    return None, f"{what} did not compile: {last}"
                os.replace(tmp, so)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
        return ctypes.CDLL(str(so)), None
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"{what} could not be built or loaded: {e}"


def load_library(source: Path, flags: list[str], what: str,
                 declare: Callable[[ctypes.CDLL], None]) -> tuple[ctypes.CDLL | None, str | None]:
    """`compile_library` for this process's target ($ARITHSWEEP_KERNEL_TARGET checked first,
    as it goes into a -march), then `declare` the loaded library's functions (their ctypes
    argument types): (the library, None) or (None, why not). Its callers keep the result
    and load once, under their own lock."""
    why = target_error()
    if why is not None:
        return None, why
    lib, why = compile_library(source, flags, what)
    if lib is not None:
        declare(lib)
    return lib, why


class Library:
    """One C helper of this process: built and loaded by the first `error()`, under a lock,
    then kept (`lib`), or the reason it could not be (`why`), which is not retried. `flags`
    is called at that load, so the environment then ($ARITHSWEEP_KERNEL_TARGET, ...) counts;
    a test that needs another build sets `lib` and `why` back to None."""

    def __init__(self, source: Path, flags: Callable[[], list[str]], what: str,
                 declare: Callable[[ctypes.CDLL], None]) -> None:
        self.source, self.flags, self.what, self.declare = source, flags, what, declare
        self.lib: ctypes.CDLL | None = None
        self.why: str | None = None
        self._lock = threading.Lock()

    def error(self) -> str | None:
        """None once loaded, else why not (no C compiler, a bad target, ...)."""
        if self.lib is not None:  # loaded: no lock (asked every step)
            return None
        with self._lock:
            if self.lib is None and self.why is None:
                self.lib, self.why = load_library(self.source, self.flags(), self.what,
                                                  self.declare)
        return self.why
