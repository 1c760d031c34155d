import os
import stat

import pytest

from contrastlab.io import atomic_path, write_json_atomic


def test_atomic_write_is_complete_and_readable(tmp_path):
    p = tmp_path / "sub" / "r.json"
    write_json_atomic(p, {"a": 1.5, "nan": float("nan")})
    assert p.read_text().strip().startswith("{")
    assert '"nan": null' in p.read_text()
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o644
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]  # no temp file left behind


def test_failed_write_leaves_the_old_file(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(p) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash mid-write")
    assert p.read_text() == "old"
    assert [f.name for f in tmp_path.iterdir()] == ["r.txt"]
