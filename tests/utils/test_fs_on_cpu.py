"""verl.utils.fs.atomic_path: the target changes only on a clean exit, and no temporary file is left either way."""

from __future__ import annotations

import pytest

from verl.utils.fs import atomic_path


def test_atomic_path_replaces_on_success_and_keeps_old_file_on_error(tmp_path):
    target = tmp_path / "sub" / "out.txt"  # the folder is created
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".out.txt.tmp-")
        tmp.write_text("first")
        assert not target.exists()  # nothing visible before the block ends
    assert target.read_text() == "first"
    with pytest.raises(RuntimeError, match="boom"), atomic_path(target) as tmp:
        tmp.write_text("half-written")
        raise RuntimeError("boom")
    assert target.read_text() == "first"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]
