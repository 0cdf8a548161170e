"""Resuming a search made by another search format: one clear refusal naming the version."""

from __future__ import annotations


def test_resuming_a_search_made_by_an_older_version_is_one_clear_refusal(tmp_path):
    """A search directory from before the frontier family cannot be unpickled by this Tune
    state: resume says which version made it instead of failing deep inside Tune."""
    import json

    import pytest

    from arithsweep.core.arithmetic import ARITHMETIC  # another: tests/test_arithmetic.py
    from arithsweep.core.errors import ConfigError
    from arithsweep.search.driver import SEARCH_FORMAT, _stored_options
    from arithsweep.search.options import SearchOptions

    old = tmp_path / "add3-old"
    old.mkdir()
    (old / "search.json").write_text(json.dumps({"name": "add3-old", "task": "add3",
                                                 "target": 0.99}))
    with pytest.raises(ConfigError, match=r"made by arithsweep .*search format 1\)"):
        _stored_options(old, SearchOptions(resume="add3-old"))
    (old / "search.json").write_text(json.dumps({"name": "add3-old", "task": "add3",
                                                 "target": 0.99,
                                                 "search_format": SEARCH_FORMAT,
                                                 "arithmetic": ARITHMETIC}))
    assert _stored_options(old, SearchOptions(resume="add3-old"))["task"] == "add3"
