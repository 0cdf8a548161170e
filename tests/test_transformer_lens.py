"""Every published model TransformerLens can express opens in it (`arithsweep export ENTRY
--transformer-lens DIR`), and the rest are refused in one line naming the missing feature.

For each published entry that exports: a fresh `HookedTransformer(cfg)` loads the written
config.json and model.safetensors strictly; on 1,000 of the task's problems (its own encoding)
its greedy answers and teacher-forced answer argmaxes are arithsweep's, and the same config in
float64 gives arithsweep's float64 logits to 1e-4 at every position (in float32 both sides
round differently: logits in the thousands move by ~0.1 between float32 and float64 in
arithsweep alone). The entries that do not export and why are docs/transformer-lens.md's table,
which the docs test checks (ARITHSWEEP_WRITE_DOCS=1 rewrites it). Random models cover the
options no published entry uses. Tests that need TransformerLens skip, saying why, without it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from arithsweep.core.config import ModelConfig
from arithsweep.core.data.tasks import get_task
from arithsweep.leaderboard import transformer_lens_export as tle

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "leaderboard" / "checkpoints"
DOCS = ROOT / "docs" / "transformer-lens.md"
START, END = "<!-- published-entries: start -->", "<!-- published-entries: end -->"


def _tl_problem() -> str | None:
    """Why TransformerLens's HookedTransformer cannot be used here, or None (no import)."""
    if importlib.util.find_spec("transformer_lens") is None:
        return "transformer_lens is not installed (pip install -e '.[interp]')"
    version = importlib.metadata.version("transformer-lens")
    if int(version.split(".")[0]) >= 4:
        return f"transformer-lens {version} has no HookedTransformer (removed in 4.0)"
    return None


needs_tl = pytest.mark.skipif(_tl_problem() is not None, reason=str(_tl_problem()))
# TransformerLens 3 warns that HookedTransformer goes in 4.0 (which the extra stays below)
pytestmark = pytest.mark.filterwarnings("ignore:HookedTransformer is deprecated")


def _published() -> dict[str, tuple[ModelConfig, object, str | None]]:
    """folder name -> (model config, task, why TransformerLens cannot express it or None)."""
    out = {}
    for d in sorted(p for p in PUBLISHED.iterdir() if (p / "config.json").is_file()):
        doc = json.loads((d / "config.json").read_text())
        cfg = ModelConfig.from_dict(doc["model"])
        task = get_task(doc["task"], doc.get("format_name"))
        out[d.name] = (cfg, task, tle.why_not(cfg, task))
    return out


ENTRIES = _published()
EXPORTABLE = [name for name, (_, _, why) in ENTRIES.items() if why is None]


def _docs_block() -> str:
    rows = ["| published entry | task | parameters | in TransformerLens |", "|---|---|---|---|"]
    for name, (_, task, why) in ENTRIES.items():
        params = name.rsplit("-", 2)[1]
        rows.append(f"| `{name}` | {task.name} | {params} | "
                    f"{'exports' if why is None else 'refused: ' + why} |")
    return "\n".join([START, *rows, END])


def test_docs_list_every_published_entry_and_why_the_refused_ones_are():
    text = DOCS.read_text(encoding="utf-8")
    block = _docs_block()
    if os.environ.get("ARITHSWEEP_WRITE_DOCS") == "1":
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text,
                      flags=re.S)
        DOCS.write_text(text, encoding="utf-8")
    found = re.search(re.escape(START) + ".*?" + re.escape(END), text, flags=re.S)
    assert found and found[0] == block, (
        f"{DOCS.name}'s table of published entries is out of date; rerun with "
        f"ARITHSWEEP_WRITE_DOCS=1 or paste:\n{block}")
    assert EXPORTABLE, "no published entry exports: the page's example would have no model"


def _load(folder: Path):
    """A HookedTransformer from an export folder alone, as a user opens it."""
    from safetensors.torch import load_file
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    model = HookedTransformer(HookedTransformerConfig(
        **json.loads((folder / "config.json").read_text()), device="cpu"))
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    return model.eval()


def _float64(folder: Path, weights: dict):
    """The folder's config in float64 (its own rotary tables), holding `weights`."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    model = HookedTransformer(HookedTransformerConfig(
        **json.loads((folder / "config.json").read_text()), device="cpu", dtype=torch.float64))
    model.load_state_dict({**model.state_dict(), **weights}, strict=True)
    return model.eval()


@needs_tl
@pytest.mark.parametrize("name", EXPORTABLE)
def test_published_entry_opens_in_transformer_lens(name, tmp_path):
    from arithsweep.core.evaluation.evaluate import answer_start, greedy_decode
    from arithsweep.core.model.checkpoint import load_checkpoint

    ck = load_checkpoint(PUBLISHED / name)
    tle.export_checkpoint(ck.path, tmp_path, check=False)  # checked here, independently
    hooked = _load(tmp_path)
    # the written tensors are the mapping of the checkpoint's weights, bit for bit
    mapped = tle.hooked_weights(ck.model, ck.task)
    state = hooked.state_dict()
    assert not [k for k, v in mapped.items() if not torch.equal(state[k], v)]

    problems = tle.check_problems(ck.task, 1000)
    assert problems[0].numel() == 1000
    inputs = ck.task.encode(*problems)[0][:, :-1]
    with torch.inference_mode():
        ours, theirs = ck.model.eval()(inputs)[0], hooked(inputs)
        p0 = answer_start(ck.task)
        assert torch.equal(ours[:, p0:].argmax(-1), theirs[:, p0:].argmax(-1))
        assert greedy_decode(ck.model, ck.task, *problems) == \
            greedy_decode(tle._AsPopulation(hooked), ck.task, *problems)
        # the same config in float64, fed the same mapping of the float64 model
        m64 = tle.float64_copy(ck.model)
        h64 = _float64(tmp_path, tle.hooked_weights(m64, ck.task))
        diff = (m64(inputs)[0] - h64(inputs)).abs().max().item()
    assert diff <= 1e-4, f"{name}: float64 logits differ by {diff:.3g}"
    print(f"{name}: max |logit diff| float64 {diff:.2g}, float32 "
          f"{(ours - theirs).abs().max().item():.2g} (logits up to "
          f"{ours.abs().max().item():.3g}); greedy answers equal on 1000 problems")


@pytest.mark.parametrize("name", [n for n in ENTRIES if n not in EXPORTABLE][:1])
def test_a_refused_entry_is_one_line_and_writes_nothing(name, tmp_path):
    out = tmp_path / "tl"
    r = subprocess.run([sys.executable, "-m", "arithsweep", "export", name,
                        "--transformer-lens", str(out)], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0] == f"error: {name}: TransformerLens cannot express {ENTRIES[name][2]}"
    assert not out.exists()


def test_an_unwritable_folder_is_one_line_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = subprocess.run([sys.executable, "-m", "arithsweep", "export", EXPORTABLE[0],
                        "--transformer-lens", str(blocker / "tl")], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: --transformer-lens") and "a-file" in lines[0]


@needs_tl
def test_cli_exports_a_published_entry_by_its_sha256_prefix(tmp_path):
    """The whole command, its own check included, on a small entry."""
    name = "add3-51-cdd87c29" if "add3-51-cdd87c29" in EXPORTABLE else EXPORTABLE[0]
    r = subprocess.run([sys.executable, "-m", "arithsweep", "export", name.rsplit("-", 1)[1],
                        "--transformer-lens", str(tmp_path / "tl")], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((tmp_path / "tl" / "arithsweep.json").read_text())
    assert Path(meta["source"]).name == name and meta["check"]["greedy_mismatches"] == 0
    assert meta["check"]["problems"] == 1000
    assert meta["check"]["max_abs_logit_diff_float64"] <= tle.TOLERANCE
    assert (tmp_path / "tl" / "config.json").is_file()


def test_entry_names_a_folder_a_published_entry_or_a_local_one(tmp_path):
    """A checkpoint folder; a published entry by folder name, id or sha256 prefix (the
    published board beside the database, as `arithsweep leaderboard` finds it)."""
    board = tmp_path / "board"
    board.mkdir()
    (board / "entries.json").write_text((ROOT / "leaderboard" / "entries.json").read_text())
    (board / "checkpoints").symlink_to(PUBLISHED)
    db = str(board / "leaderboard.db")  # not there: no local entries
    entry = next(e for e in json.loads((board / "entries.json").read_text())["entries"]
                 if e["checkpoint"].endswith(EXPORTABLE[0]))
    want = board / entry["checkpoint"]
    for key in (EXPORTABLE[0], str(entry["id"]), entry["sha256"][:8]):
        assert tle.resolve(key, db) == want, key
    assert tle.resolve(str(PUBLISHED / EXPORTABLE[0]), db) == PUBLISHED / EXPORTABLE[0]
    with pytest.raises(tle.ArithsweepError, match="neither a checkpoint directory"):
        tle.resolve("no-such-entry", db)


def test_fast_paths_do_not_import_transformer_lens(tmp_path):
    code = ("import sys\nfrom arithsweep.cli.app import main\n"
            "sys.argv = ['arithsweep', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted({'torch', 'transformer_lens'} & set(sys.modules)), "
            "file=sys.stderr)\n")
    for argv in (["--help"], ["leaderboard", "--db", str(tmp_path / "none.db")]):
        r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
        assert "HEAVY []" in r.stderr, (argv, r.stderr[-2000:])


# ------------------------------------------------------------- options no entry publishes
ADD3, SUB3 = get_task("add3"), get_task("sub3")
FEATURES = {  # name -> ModelConfig fields on add3 (pad format)
    "gqa-rope-split-biases": dict(n_layers=2, d_model=16, n_heads=4, n_kv_heads=2, pos="rope",
                                  attn_bias=True, mlp_bias=True, unembed_bias=True),
    "rope-interleaved-qknorm-shared": dict(d_model=12, n_heads=2, d_head=8, d_vhead=4,
                                           pos="rope", rope_pairs="interleaved",
                                           qk_norm="shared", rope_base=7.0),
    "sinusoidal-ln-nobias-untied": dict(d_model=10, n_heads=2, pos="sinusoidal",
                                        norm_bias=False, tie_embeddings=False,
                                        activation="gelu"),
    "abacus-pad-lowrank": dict(d_model=12, n_heads=3, pos="abacus", abacus_max=6, rank=3),
    "loops-unrolled-no-norm": dict(d_model=8, n_heads=2, n_loops=3, input_injection=False,
                                   norm="none"),
    "attention-only-tie-kv": dict(d_model=8, n_heads=2, d_ff=0, tie_kv=True, norm="rms"),
    "swiglu-tied-gate-down-scaled": dict(d_model=8, n_heads=1, d_head=4, d_vhead=4,
                                         activation="swiglu", tie_gate=True,
                                         mlp_down="up_t_scaled", tie_k="scaled", tie_v=True,
                                         tie_o=True, norm_weight="scalar", share_norms=True),
    "scalar-qknorm-rotated-k-up-t-rot": dict(d_model=8, n_heads=2, d_head=4, d_vhead=2,
                                             pos="rope", qk_norm="scalar",
                                             qk_norm_pattern=[1, 0.25, 0, -1], tie_k="rotated",
                                             mlp_down="up_t_rot", d_ff=6),
    "swiglu-gate-per-unit-arc2": dict(d_model=8, n_heads=1, activation="swiglu", tie_gate=True,
                                      gate_scale="vector", embed="arc2",
                                      arc_init=[2.5, -1.2, 0.29]),
    "swiglu-gate-equals-up": dict(d_model=8, n_heads=1, activation="swiglu", tie_gate=True,
                                  gate_scale="none", mlp_down="up_t"),
    "learned-qk-from-tokens": dict(d_model=6, d_embed=4, n_heads=1, d_head=3, d_vhead=3,
                                   qk_from_tokens=True, embed="arc"),
}


@torch.no_grad()
def _random_model(fields: dict, task=ADD3, seed: int = 0):
    from arithsweep.core.model.model import ArithTransformer

    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, **fields)
    model = ArithTransformer(cfg, seeds=[seed])
    g = torch.Generator().manual_seed(seed + 1)
    for p in model.parameters():  # every gain, bias and tie number away from its start
        p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


@needs_tl
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_each_option_maps_exactly(feature):
    model = tle.float64_copy(_random_model(FEATURES[feature]))
    assert tle.why_not(model.cfg, ADD3) is None
    hooked, _ = tle.build_hooked(model, ADD3, feature)
    res = tle.compare(model, hooked, ADD3, tle.check_problems(ADD3, 300), greedy=False)
    assert res["max_abs_logit_diff"] <= 1e-9, res


@pytest.mark.parametrize("fields,task,words", [
    (dict(pos="abacus_bias"), ADD3, "abacus_bias positions"),
    (dict(pos="abacus_rope", d_head=8), ADD3, "abacus_rope positions"),
    (dict(pos="abacus"), SUB3, "abacus positions on format pad"),
    (dict(n_loops=2), ADD3, "input injection"),
    (dict(n_loops=2, input_injection=False, loop_mix=True), ADD3, "loop_mix"),
    (dict(final_norm=False), ADD3, "no final norm"),
    (dict(activation="swiglu", mlp_bias=True), ADD3, "swiglu with MLP biases"),
    (dict(qk_norm="head", d_head=4, d_vhead=8), ADD3, "QK-norm on q/k heads narrower"),
])
def test_what_transformer_lens_lacks_is_named(fields, task, words):
    cfg = ModelConfig(vocab_size=task.vocab_size, n_ctx=task.n_ctx, **fields)
    assert words in (tle.why_not(cfg, task) or "")


@needs_tl
def test_an_export_whose_check_fails_writes_nothing(monkeypatch, tmp_path):
    """A mapping bug (here: W_U scaled) is caught by export's own check, not written."""
    mapped = tle.hooked_weights

    def wrong(model, task):
        return {k: v * 1.01 if k == "unembed.W_U" else v for k, v in mapped(model, task).items()}

    monkeypatch.setattr(tle, "hooked_weights", wrong)
    with pytest.raises(tle.TransformerLensUnsupported, match="not exported"):
        tle.export_checkpoint(PUBLISHED / EXPORTABLE[-1], tmp_path / "tl")
    assert not (tmp_path / "tl").exists()


def test_an_option_the_export_does_not_know_is_refused(monkeypatch):
    monkeypatch.setattr(tle, "KNOWN", tle.KNOWN - {"tie_kv"})
    cfg = ModelConfig(vocab_size=ADD3.vocab_size, n_ctx=ADD3.n_ctx, tie_kv=True)
    assert tle.why_not(cfg, ADD3) == "tie_kv=True (an option this export does not know)"
