"""`arithsweep finish CHECKPOINT --out DIR`: the near-miss finishers on a saved checkpoint.

The add2 fixture's checkpoint is damaged (one weight nudged) so that it misses some problems;
one round of targeted fine-tuning on its training-split errors is kept only if held-out exact
match does not fall, and the result is a new checkpoint that loads and says where it came from.
"""

from __future__ import annotations

import json

import torch
from helpers import run  # tests/ is on sys.path (rootdir import mode)
from safetensors.torch import load_file, save_file

from arithsweep.core.hashing import sha256_file
from arithsweep.core.model.checkpoint import load_checkpoint


def _nudge(ck) -> None:
    """Push the checkpoint off its optimum a little (and re-seal its sha256)."""
    w = load_file(str(ck / "model.safetensors"))
    name = next(k for k in w if k.endswith("weight") and w[k].dim() == 2)
    w[name] = w[name] + 0.15 * torch.randn(w[name].shape, generator=torch.Generator()
                                              .manual_seed(1))
    save_file(w, str(ck / "model.safetensors"))
    doc = json.loads((ck / "config.json").read_text())
    doc["weights_sha256"] = sha256_file(ck / "model.safetensors")
    (ck / "config.json").write_text(json.dumps(doc))


def test_finish_writes_a_finished_checkpoint(ckpt, tmp_path, capsys):
    _nudge(ckpt)
    out = tmp_path / "fin"
    code, o, e = run(capsys, "finish", ckpt, "--out", out, "--set", "finish_rounds=2",
                      "--set", "finish_steps=50", "--set", "finish_lr=3e-3",
                      "--set", "finish_pool=2000", "--json")
    assert code == 0, e
    res = json.loads(o)
    (rec,) = res["finishers"]
    assert rec["finisher"] == "targeted fine-tuning" and rec["rounds"] >= 1
    assert res["held_out"] >= res["held_out_before"]  # never kept worse
    ck = load_checkpoint(out)
    assert ck.sha256 == res["sha256"] and ck.meta["finished_from"] == res["source_sha256"]
    assert ck.meta["final_exact_match"] == res["final_exact_match"]


def test_finish_without_a_finisher_is_one_line(ckpt, tmp_path, capsys):
    code, _, e = run(capsys, "finish", ckpt, "--out", tmp_path / "x")
    assert code == 2 and "finish_rounds" in e and len(e.strip().splitlines()) == 1
    code, _, e = run(capsys, "finish", ckpt, "--out", tmp_path / "x", "--set", "d_model=9",
                      "--set", "finish_rounds=1")
    assert code == 2 and "model field" in e and len(e.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_finished_entry_keeps_its_start_and_its_published_command_finishes_it_again(
        ckpt, tmp_path, capsys, monkeypatch):
    """`finish` keeps the model it began from in start/; verify records `finish start --set
    ...` as the entry's command; publish ships the start and names it; that command, run from
    the published folder, gives the same weights on this machine."""
    import re
    import shlex
    from pathlib import Path

    _nudge(ckpt)
    source_sha = load_checkpoint(ckpt).sha256
    out = tmp_path / "fin"
    code, o, e = run(capsys, "finish", ckpt, "--out", out, "--set", "finish_rounds=1",
                      "--set", "finish_steps=30", "--set", "finish_lr=3e-3",
                      "--set", "finish_pool=1000", "--json")
    assert code == 0, e
    finished = load_checkpoint(out)
    assert sha256_file(out / "start" / "model.safetensors") == source_sha
    assert finished.meta["finish_set"] == {"finish_rounds": 1, "finish_steps": 30,
                                           "finish_lr": 3e-3, "finish_pool": 1000}
    assert finished.meta["repeats"] == "a machine of the same kind"
    monkeypatch.chdir(tmp_path)
    code, o, e = run(capsys, "verify", out, "--record", "--db", "lb.db", "--target", "0.5",
                     "--json")
    assert code == 0, e
    assert json.loads(o)["reproduce"].startswith(f"arithsweep finish {out / 'start'} ")
    assert run(capsys, "publish", "--db", "lb.db")[0] == 0
    (folder,) = Path("leaderboard/checkpoints").iterdir()
    assert sha256_file(folder / "start" / "model.safetensors") == source_sha
    md = Path("leaderboard/LEADERBOARD.md").read_text()
    assert f"published in `leaderboard/checkpoints/{folder.name}/start/`" in md
    cmd = next(c for c in re.findall(r"```sh\n(.*?)\n```", md) if "finish" in c)
    assert f"arithsweep finish leaderboard/checkpoints/{folder.name}/start --out" in cmd
    assert "--seeds" not in md.split(f"checkpoints/{folder.name}/start --out")[1].split("##")[0]
    args = shlex.split(cmd)[1:]
    args[args.index("--out") + 1] = "again"
    code, o, e = run(capsys, *args, "--json")
    assert code == 0, e
    assert json.loads(o)["sha256"] == finished.sha256
    # the folder it wrote, start/ included, is its own to publish over again
    assert run(capsys, "publish", "--db", "lb.db")[0] == 0


def test_finishing_a_continued_checkpoint_keeps_its_chain_of_starts(ckpt, tmp_path, capsys):
    """A checkpoint that itself continued an earlier model (its own start/) is finished with
    that chain kept: out/start is it, out/start/start its start."""
    import shutil

    shutil.copytree(ckpt, tmp_path / "earlier")
    shutil.copytree(tmp_path / "earlier", ckpt / "start")
    _nudge(ckpt)
    out = tmp_path / "fin"
    code, _, e = run(capsys, "finish", ckpt, "--out", out, "--set", "finish_rounds=1",
                     "--set", "finish_steps=10", "--set", "finish_pool=500")
    assert code == 0, e
    assert sha256_file(out / "start" / "model.safetensors") == load_checkpoint(ckpt).sha256
    assert sha256_file(out / "start" / "start" / "model.safetensors") == \
        load_checkpoint(tmp_path / "earlier").sha256


def test_a_member_finished_inside_its_pack_is_retrained_by_the_whole_pack(ckpt):
    """The finishers draw from the run's first seed, not the member's: `--seeds 1 --seed s`
    would finish it otherwise, so a pack's finished member names its whole pack's command."""
    from arithsweep.leaderboard.verify import reproduce_command

    doc = json.loads((ckpt / "config.json").read_text())
    alone = reproduce_command(load_checkpoint(ckpt))
    assert "--seeds 1 --seed" in alone
    doc["meta"]["finished_by"], doc["train"]["seeds"] = "cma-es", 8
    (ckpt / "config.json").write_text(json.dumps(doc))
    pack = reproduce_command(load_checkpoint(ckpt))
    assert pack.startswith("arithsweep train ") and f"--config {ckpt / 'config.json'}" in pack
    assert "--seeds" not in pack and "--seed" not in pack
