"""``contrastlab data get`` against a real HTTP server on 127.0.0.1: verified, atomic, resumable, refusing."""

from __future__ import annotations

import errno
import io
import json
import os
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from contrastlab import cli
from contrastlab.cli.data import _task_table
from contrastlab.data import archives, download
from contrastlab.data.catalog import DOWNLOADS, Download, RemoteFile
from contrastlab.data.download import MANIFEST, DownloadError, fetch, url_download, verified_copy
from contrastlab.data.registry import dataset_available, load_dataset
from contrastlab.tasks import read_beir_task
from tests.data.http_server import Served, md5, serve, sha256, task_zip
from tests.data.writers import WRITERS


def _spec(url: str, data: bytes, name: str = "scifact") -> Download:
    """The catalogue's entry for ``name``, served from ``url`` with ``data``'s checksum."""
    base = DOWNLOADS[name]
    return replace(base, base_url=url, files=(RemoteFile(base.files[0].name, md5=md5(data)),))


def _leftovers(root: Path) -> list[str]:
    """Anything under root that is not the download cache."""
    return sorted(p.name for p in root.iterdir() if p.name != ".downloads")


def test_a_task_is_downloaded_verified_installed_and_read(tmp_path: Path) -> None:
    data = task_zip()
    with serve(Served(files={"/scifact.zip": data})) as srv:
        done = fetch(_spec(srv.url, data), tmp_path)
        assert not done.skipped and done.bytes == len(data) and done.path == tmp_path / "scifact"
        task = read_beir_task(tmp_path / "scifact", "test")
        assert task.query_ids == ("q1", "q2") and task.qrels["q2"] == {"d2": 2}
        record = json.loads((tmp_path / "scifact" / MANIFEST).read_text())
        assert record["downloaded"][0]["md5"] == md5(data) and record["downloaded"][0]["sha256"] == sha256(data)
        assert set(record["files"]) == {"corpus.jsonl", "queries.jsonl", "qrels/test.tsv"}
        assert _leftovers(tmp_path) == ["scifact"] and not (tmp_path / ".downloads").exists()
        # a rerun finds the verified copy and asks the server for nothing
        asked = len(srv.requests)
        again = fetch(_spec(srv.url, data), tmp_path)
        assert again.skipped and again.bytes == 0 and len(srv.requests) == asked


def test_a_copy_changed_on_disk_is_not_taken_for_verified(tmp_path: Path) -> None:
    data = task_zip()
    with serve(Served(files={"/scifact.zip": data})) as srv:
        spec = _spec(srv.url, data)
        fetch(spec, tmp_path)
        with (tmp_path / "scifact" / "corpus.jsonl").open("a") as f:
            f.write('{"_id": "d9", "text": "added"}\n')
        assert verified_copy(spec, tmp_path) is None
        with pytest.raises(DownloadError, match="exists but holds no verified download"):
            fetch(spec, tmp_path)
        # a manifest of other checksums is no verification either
        other = replace(spec, files=(RemoteFile("scifact.zip", md5="0" * 32),))
        assert verified_copy(other, tmp_path) is None


def test_a_truncated_transfer_fails_then_resumes_with_a_range_request(tmp_path: Path) -> None:
    data = task_zip(extra={"scifact/padding.txt": os.urandom(20_000)})
    cut = len(data) // 3
    with serve(Served(files={"/scifact.zip": data}, cut={"/scifact.zip": cut})) as srv:
        spec = _spec(srv.url, data)
        with pytest.raises(DownloadError, match=rf"scifact.zip: the transfer ended after {cut} of {len(data)} bytes"):
            fetch(spec, tmp_path)
        assert not (tmp_path / "scifact").exists()
        assert (tmp_path / ".downloads" / "scifact.zip.part").stat().st_size == cut
        done = fetch(spec, tmp_path)
        assert srv.requests[-1] == ("/scifact.zip", f"bytes={cut}-")
        assert done.bytes == len(data) - cut
        assert read_beir_task(done.path, "test").num_judgements == 2


def test_a_server_without_ranges_restarts_the_file_cleanly(tmp_path: Path) -> None:
    data = task_zip(extra={"scifact/padding.txt": os.urandom(20_000)})
    with serve(Served(files={"/scifact.zip": data}, cut={"/scifact.zip": 5000}, ranges=False)) as srv:
        spec = _spec(srv.url, data)
        with pytest.raises(DownloadError, match="transfer ended after 5000"):
            fetch(spec, tmp_path)
        done = fetch(spec, tmp_path)  # asks for a range, gets the whole file with 200, writes it from the start
        assert srv.requests[-1][1] == "bytes=5000-" and done.bytes == len(data)
        assert verified_copy(spec, tmp_path) == tmp_path / "scifact"


def test_a_part_left_by_another_address_is_not_resumed(tmp_path: Path) -> None:
    data = task_zip()
    cache = tmp_path / ".downloads"
    cache.mkdir()
    (cache / "scifact.zip.part").write_bytes(b"garbage from elsewhere")
    (cache / "scifact.zip.part.json").write_text(json.dumps({"url": "http://other/", "md5": "x", "sha256": ""}))
    with serve(Served(files={"/scifact.zip": data})) as srv:
        fetch(_spec(srv.url, data), tmp_path)
        assert srv.requests == [("/scifact.zip", None)]  # no Range: the stale part was dropped
    assert read_beir_task(tmp_path / "scifact", "test").num_judgements == 2


def test_a_checksum_mismatch_names_the_file_and_both_checksums_and_leaves_nothing(tmp_path: Path) -> None:
    data = task_zip()
    with serve(Served(files={"/scifact.zip": data})) as srv:
        spec = replace(_spec(srv.url, data), files=(RemoteFile("scifact.zip", md5="0" * 32),))
        with pytest.raises(DownloadError) as e:
            fetch(spec, tmp_path)
    assert str(e.value).startswith(f"scifact.zip: checksum mismatch: md5 expected {'0' * 32}, got {md5(data)}")
    assert _leftovers(tmp_path) == [] and not list((tmp_path / ".downloads").glob("*.part"))


@pytest.mark.parametrize("member", ["../escaped.txt", "/abs/escaped.txt", "scifact/../../escaped.txt"])
def test_a_zip_member_escaping_the_target_is_refused_before_anything_is_written(tmp_path: Path, member: str) -> None:
    data = task_zip(extra={member: b"x"})
    root = tmp_path / "root"
    with serve(Served(files={"/scifact.zip": data})) as srv, pytest.raises(DownloadError, match="outside the target"):
        fetch(_spec(srv.url, data), root)
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "abs").exists()
    assert _leftovers(root) == []


def test_an_archive_that_is_not_a_zip_and_a_zip_without_a_corpus_are_refused(tmp_path: Path) -> None:
    not_zip = b"<html>this is a login page, not a zip</html>" * 10
    no_corpus = task_zip(with_corpus=False)
    with serve(Served(files={"/scifact.zip": not_zip})) as srv:
        with pytest.raises(DownloadError, match="scifact.zip: not a zip or tar archive"):
            fetch(_spec(srv.url, not_zip), tmp_path / "a")
        srv.files["/scifact.zip"] = no_corpus
        with pytest.raises(DownloadError, match="scifact.zip: holds no corpus.jsonl"):
            fetch(_spec(srv.url, no_corpus), tmp_path / "b")
    for root in (tmp_path / "a", tmp_path / "b"):
        assert _leftovers(root) == [] and not (root / ".downloads").exists()  # nothing a rerun would trust


def test_a_root_that_is_a_file_or_not_writable_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    spec = _spec("http://127.0.0.1:9/", b"")
    with pytest.raises(DownloadError, match=r"--root: .*file is a file, not a folder"):
        fetch(spec, tmp_path / "file")
    with pytest.raises(DownloadError, match="--root: .* is not a writable folder"):
        fetch(spec, tmp_path / "file" / "below")
    if os.geteuid() == 0:
        return  # root writes through any mode bits; the cases above stand for it
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        with pytest.raises(DownloadError, match="--root: .*locked is not a writable folder"):
            fetch(spec, locked)
    finally:
        locked.chmod(0o700)


def test_a_partial_folder_left_by_a_killed_run_is_never_taken_for_the_task(tmp_path: Path) -> None:
    # a run killed while unpacking leaves a hidden .partial folder (and no target)
    stale = tmp_path / ".scifact.partial-abc123"
    (stale / "scifact").mkdir(parents=True)
    (stale / "scifact" / "corpus.jsonl").write_text('{"_id": "half')
    data = task_zip()
    with serve(Served(files={"/scifact.zip": data})) as srv:
        spec = _spec(srv.url, data)
        assert verified_copy(spec, tmp_path) is None
        (stale / "scifact" / "queries.jsonl").write_text('{"_id": "q1", "text": "a"}\n')
        (stale / "scifact" / "qrels").mkdir()
        (stale / "scifact" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
        assert _task_table(tmp_path) == []  # `contrastlab data` lists no task from a hidden partial folder
        done = fetch(spec, tmp_path)
    assert not stale.exists() and _leftovers(tmp_path) == ["scifact"]
    assert _task_table(tmp_path) == [(tmp_path / "scifact", ["test"])]
    assert read_beir_task(done.path, "test").num_judgements == 2


def test_an_interruption_before_the_rename_leaves_no_folder_that_looks_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(download, "_write_manifest", interrupted)
    data = task_zip()
    with serve(Served(files={"/scifact.zip": data})) as srv, pytest.raises(KeyboardInterrupt):
        fetch(_spec(srv.url, data), tmp_path)
    assert _leftovers(tmp_path) == []


def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("where", ["download", "unpack"])
def test_a_full_disk_leaves_nothing_that_looks_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "download":
        monkeypatch.setattr(download, "_write_chunk", _enospc)
    else:
        monkeypatch.setattr(archives.shutil, "copyfileobj", _enospc)
    data = task_zip()
    with serve(Served(files={"/scifact.zip": data})) as srv, pytest.raises(DownloadError, match="no space left"):
        fetch(_spec(srv.url, data), tmp_path)
    assert _leftovers(tmp_path) == []


def test_an_image_archive_unpacks_to_the_layout_its_loader_reads(tmp_path: Path) -> None:
    src = tmp_path / "src"
    WRITERS["cifar10"](src, 4)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(src / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    data = buf.getvalue()
    root = tmp_path / "root"
    with serve(Served(files={"/cifar-10-python.tar.gz": data})) as srv:
        done = fetch(_spec(srv.url, data, "cifar10"), root)
    assert done.path == root / "cifar-10-batches-py" and dataset_available("cifar10", root, "train")
    assert load_dataset("cifar10", root, "test").images.shape[1:] == (3, 32, 32)


def test_files_that_are_not_archives_are_saved_as_they_are(tmp_path: Path) -> None:
    train, test = b"train mat bytes", b"test mat bytes"
    spec = replace(
        DOWNLOADS["svhn"],
        files=(RemoteFile("train_32x32.mat", md5=md5(train)), RemoteFile("test_32x32.mat", md5=md5(test))),
    )
    with serve(Served(files={"/train_32x32.mat": train, "/test_32x32.mat": test})) as srv:
        spec = replace(spec, base_url=srv.url)
        fetch(spec, tmp_path)
        assert (tmp_path / "train_32x32.mat").read_bytes() == train
        assert (tmp_path / "test_32x32.mat").read_bytes() == test
        asked = len(srv.requests)
        assert fetch(spec, tmp_path).skipped and len(srv.requests) == asked


def test_tar_members_that_are_links_or_escape_are_refused(tmp_path: Path) -> None:
    for name, kind in (("../up.txt", tarfile.REGTYPE), ("data/link", tarfile.SYMTYPE), ("/abs.txt", tarfile.REGTYPE)):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tf:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
                tf.addfile(info)
            else:
                info.size = 1
                tf.addfile(info, io.BytesIO(b"x"))
        archive = tmp_path / "a.tar.gz"
        archive.write_bytes(buf.getvalue())
        with pytest.raises(archives.ArchiveError, match="refusing the archive"):
            archives.unpack_archive(archive, tmp_path / "out")
        assert not (tmp_path / "up.txt").exists() and not (tmp_path / "out" / "data" / "link").exists()


def test_a_url_needs_its_sha256_and_a_plain_name() -> None:
    with pytest.raises(DownloadError, match="--sha256: a URL needs"):
        url_download("http://h/t.zip", None, "t")
    with pytest.raises(DownloadError, match="--sha256: expected 64 hexadecimal digits"):
        url_download("http://h/t.zip", "abc", "t")
    with pytest.raises(DownloadError, match="--name: expected a plain folder name"):
        url_download("http://h/t.zip", "a" * 64, "../t")
    with pytest.raises(DownloadError, match="--name: a URL needs"):
        url_download("http://h/t.zip", "a" * 64, None)


# ----------------------------------------------------------------------------------------------- command


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_fetches_a_url_and_the_task_reads_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = task_zip("mytask")
    with serve(Served(files={"/files/mytask.zip": data})) as srv:
        url = srv.url + "files/mytask.zip"
        argv = ["data", "get", url, "--sha256", sha256(data), "--name", "mytask", "--root", str(tmp_path), "--quiet"]
        code, out, err = _run(argv, capsys)
        assert code == 0, err
        assert "mytask: " in out and "checksum verified" in out
        code, out, _ = _run(argv, capsys)
        assert code == 0 and "already in" in out
    monkeypatch.setenv("CONTRASTLAB_DATA", str(tmp_path))
    monkeypatch.chdir(tmp_path.parent)
    assert read_beir_task("mytask", "test").name == "mytask"


def test_command_errors_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = task_zip()
    with serve(Served(files={"/scifact.zip": fake})) as srv:
        # the published md5 of BEIR's scifact.zip, against a zip this test built
        code, _, err = _run(["data", "get", "scifact", "--mirror", srv.url, "--root", str(tmp_path), "--quiet"], capsys)
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
        assert (
            f"scifact.zip: checksum mismatch: md5 expected {DOWNLOADS['scifact'].files[0].md5}, got {md5(fake)}" in err
        )
        assert _leftovers(tmp_path) == []
        code, _, err = _run(["data", "get", srv.url + "x.zip", "--sha256", "0" * 64, "--name", "x", "--root",
                             str(tmp_path), "--quiet"], capsys)  # fmt: skip
        assert code == 2 and err.count("\n") == 1 and "HTTP 404" in err
    for argv, needle in (
        (["data", "get", "no-such-task"], "unknown dataset 'no-such-task'; known tasks: msmarco, trec-covid"),
        (["data", "get", "scifact", "--sha256", "0" * 64], "--sha256: applies to a URL"),
        (["data", "get", "scifact", "--mirror", "ftp://x/"], "--mirror: expected an http(s)://"),
        (["data", "get", "scifact", "--root", str(tmp_path / "f" / "g")], "--root"),
        (["data", "get"], "name: which dataset?"),
    ):
        (tmp_path / "f").write_text("x")
        code, _, err = _run(argv, capsys)
        assert code == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err, (argv, err)


def test_the_byte_bar_prints_a_line_per_tenth_in_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTRASTLAB_PROGRESS", "plain")
    stream = io.StringIO()
    bar = download.ByteBar(stream=stream)
    for done in range(0, 1_000_001, 50_000):
        bar("scifact.zip", done, 1_000_000)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 11 and lines[-1] == "scifact.zip: 1.0 MB of 1.0 MB"
    monkeypatch.setenv("CONTRASTLAB_PROGRESS", "off")
    quiet = io.StringIO()
    download.ByteBar(stream=quiet)("scifact.zip", 10, 100)
    assert quiet.getvalue() == ""
    monkeypatch.setenv("CONTRASTLAB_PROGRESS", "live")
    live = io.StringIO()
    bar = download.ByteBar(stream=live)
    bar("scifact.zip", 10, 100)
    bar("scifact.zip", 100, 100)
    bar.close()
    assert bar.mode == "live" and "scifact.zip" in live.getvalue()
