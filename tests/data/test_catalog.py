"""The catalogue of ``data get``: published checksums well formed, layouts the loaders read, every task documented."""

from __future__ import annotations

import re
from pathlib import Path

from contrastlab.data.catalog import BEIR_BASE_URL, DOWNLOADS, task_names
from contrastlab.data.registry import DATASETS

DOCS = (Path(__file__).resolve().parents[2] / "docs" / "tasks.md").read_text(encoding="utf-8")


def test_every_entry_has_a_published_checksum_an_address_and_a_source() -> None:
    for name, spec in DOWNLOADS.items():
        assert spec.name == name and spec.files and spec.checksum_source and spec.homepage
        assert spec.base_url.startswith(("http://", "https://")) and spec.base_url.endswith("/")
        for f in spec.files:
            assert re.fullmatch(r"[0-9a-f]{32}", f.md5) or re.fullmatch(r"[0-9a-f]{64}", f.sha256), (name, f)
        assert (spec.target != "") == spec.unpack
    md5s = [f.md5 for spec in DOWNLOADS.values() for f in spec.files]
    assert len(set(md5s)) == len(md5s)


def test_the_tasks_are_beirs_zips_each_in_the_docs_table() -> None:
    assert {"scifact", "nfcorpus", "arguana", "msmarco", "cqadupstack"} <= set(task_names())
    for name in task_names():
        spec = DOWNLOADS[name]
        assert spec.base_url == BEIR_BASE_URL and spec.files[0].name == f"{name}.zip" and spec.target == name
        assert f"| `{name}` | {spec.homepage} |" in DOCS


def test_image_entries_unpack_to_the_files_their_loaders_read() -> None:
    for name, spec in DOWNLOADS.items():
        if spec.kind != "images":
            continue
        registered = DATASETS[name.removesuffix("-extra")]
        wanted = {f for files in registered.files.values() for f in files}
        assert set(spec.expected) <= wanted, name
        if spec.unpack:
            assert all(Path(f).parts[0] == spec.target for f in spec.expected), name
