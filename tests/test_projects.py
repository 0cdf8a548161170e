"""LEADERBOARD.md's per-project sections are built from verified rows only."""

from __future__ import annotations

from arithsweep.leaderboard.projects import PROJECTS, project_sections


def _row(task, params, pos="learned", by_class=None):
    return {"task": task, "params": params, "exact_match": 0.995, "nines": 2, "suite": "v2",
            "sha256": f"{params:064x}", "model_config": {"pos": pos},
            "breakdown": {"by_class": by_class} if by_class else {}}


def test_each_project_gets_a_section_and_says_when_nothing_reproduces_it(tmp_path):
    sections = project_sections([_row("add10", 742)], tmp_path, lambda r: "1/6")
    assert len(sections) == len(PROJECTS)
    adder = next(s for s in sections if s.startswith("## AdderBoard"))
    assert "| add10 | 742 | 99.5000% | 2 | v2 | 1/6 |" in adder
    abacus = next(s for s in sections if "McLeish" in s)
    assert "Not reproduced yet" in abacus and "742" not in abacus


def test_quirke_section_lists_nines_per_class(tmp_path):
    by_class = {"M0": {"n": 1000, "correct": 1000}, "N1": {"n": 2000, "correct": 1998}}
    sections = project_sections([_row("sub3", 300, by_class=by_class)], tmp_path, lambda r: "")
    quirke = next(s for s in sections if "Quirke" in s)
    assert "| M0 | 1,000 | 100.0000% | 3 |" in quirke
    assert "| N1 | 2,000 | 99.9000% | 3 |" in quirke


def test_abacus_entries_and_pictures_are_linked_when_present(tmp_path):
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "ood-add8.png").write_bytes(b"\x89PNG")
    sections = project_sections([_row("add8", 500, pos="abacus")], tmp_path, lambda r: "")
    abacus = next(s for s in sections if "McLeish" in s)
    assert "| add8 | 500 |" in abacus and "![ood-add8](pictures/ood-add8.png)" in abacus
