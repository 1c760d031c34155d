import json
from pathlib import Path

import pytest

from contrastlab.data.text.pairs import TextPairs, read_text_pairs


def _write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path


def test_tsv_rows_and_default_columns(tmp_path: Path) -> None:
    p = _write(tmp_path / "a.tsv", "q1\tp1\tn1\nq2\tp2\tn2")  # no final newline
    pairs = read_text_pairs(p)
    assert pairs.rows == (("q1", "p1", "n1"), ("q2", "p2", "n2"))
    assert pairs.columns == ("anchor", "positive", "negative_1")
    assert pairs.num_negatives == 1 and pairs.name == "a.tsv"


def test_tsv_header_crlf_and_bom(tmp_path: Path) -> None:
    p = _write(tmp_path / "a.tsv", b"\xef\xbb\xbfquery\tdoc\r\nq1\tp1\r\n")
    pairs = read_text_pairs(p, header=True)
    assert pairs.columns == ("query", "doc") and pairs.rows == (("q1", "p1"),)


def test_csv_with_quotes_commas_and_newlines(tmp_path: Path) -> None:
    p = _write(tmp_path / "a.csv", 'anchor,positive\n"a, b","line one\nline two"\nc,d\n')
    pairs = read_text_pairs(p, header=True)
    assert pairs.rows == (("a, b", "line one\nline two"), ("c", "d"))


def test_jsonl_lists_and_objects(tmp_path: Path) -> None:
    p = _write(tmp_path / "a.jsonl", '["q1", "p1"]\n["q2", "p2"]\n')
    assert read_text_pairs(p).rows == (("q1", "p1"), ("q2", "p2"))
    lines = [{"anchor": "q", "positive": "p", "negatives": ["n1", "n2"]}] * 2
    p = _write(tmp_path / "b.jsonl", "\n".join(json.dumps(x) for x in lines))
    pairs = read_text_pairs(p)
    assert pairs.rows[0] == ("q", "p", "n1", "n2")
    assert pairs.columns == ("anchor", "positive", "negatives[0]", "negatives[1]")
    p = _write(tmp_path / "c.jsonl", json.dumps({"anchor": "q", "positive": "p", "negative": "n"}))
    assert read_text_pairs(p).columns == ("anchor", "positive", "negative")


def test_saved_hf_dataset(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"q": ["a", "b"], "d": ["x", "y"], "label": [0, 1]})
    ds.save_to_disk(str(tmp_path / "ds"))
    pairs = read_text_pairs(tmp_path / "ds")
    assert pairs.columns == ("q", "d") and pairs.rows == (("a", "x"), ("b", "y"))
    datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "dd"))
    assert len(read_text_pairs(tmp_path / "dd", split="train")) == 2
    with pytest.raises(ValueError, match=r"^split: .* holds splits \['train'\]"):
        read_text_pairs(tmp_path / "dd")


def test_round_trip_through_hf_dataset() -> None:
    pytest.importorskip("datasets")
    pairs = TextPairs((("a", "b", "c"), ("d", "e", "f")))
    ds = pairs.to_hf_dataset()
    assert ds.column_names == ["anchor", "positive", "negative_1"] and ds["negative_1"] == ["c", "f"]


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("a.tsv", "q\tp\n\nq\tp\n", "line 2: empty line"),
        ("a.tsv", "q\tp\nq\tp\tn\n", "line 2: 3 columns, the first row has 2"),
        ("a.tsv", "q\n", "line 1: 1 column, need at least 2"),
        ("a.tsv", "q\t \n", "line 1: column 2 is empty"),
        ("a.tsv", b"q\tp\nq\t\xff\xfe\n", "line 2: not UTF-8"),
        ("a.csv", "q,p\n\nq,p\n", "line 2: empty line"),
        ("a.csv", "q,p\nq,p,n\n", "line 2: 3 columns"),
        ("a.csv", 'q,p\nq,"p\n', "not valid CSV"),
        ("a.jsonl", '["q", "p"]\n{"anchor": "q"}\n', "line 2: an object needs 'anchor' and 'positive'"),
        ("a.jsonl", '["q", "p"]\nnot json\n', "line 2: not valid JSON"),
        ("a.jsonl", '["q", "p"]\n\n', "line 2: empty line"),
        ("a.jsonl", '["q", 3]\n', "line 1: column 2 is a int"),
        ("a.jsonl", '"just a string"\n', "line 1: expected a JSON list or object"),
        ("a.txt", "q\tp\n", "has suffix '.txt'"),
        ("a.tsv", "", "holds no rows"),
        ("a.tsv", b"q\tp\nq\tp\x00x\n", "line 2: column 2 holds a NUL byte"),
        ("a.csv", b'q,p\n"q\x00",p\n', "line 2: column 1 holds a NUL byte"),
        ("a.jsonl", '["q", "p"]\n["q", "p\\u0000"]\n', "line 2: column 2 holds a NUL byte"),
        ("a.tsv", "query one\tits answer\n".encode("utf-16-le"), "wrong encoding: it looks like UTF-16-LE without"),
        ("a.csv", "query one,its answer\n".encode("utf-16-be"), "wrong encoding: it looks like UTF-16-BE without"),
        ("a.tsv", "query one\tits answer\n".encode("utf-16"), "wrong encoding: it looks like UTF-16-LE (byte-order"),
        ("a.jsonl", '["q", "p"]\n'.encode("utf-32-le"), "wrong encoding: it looks like UTF-32-LE without"),
    ],
)
def test_bad_files_name_the_file_and_line(tmp_path: Path, name: str, data: str | bytes, message: str) -> None:
    p = _write(tmp_path / name, data)
    with pytest.raises(ValueError, match="^path: ") as info:
        read_text_pairs(p)
    assert str(p) in str(info.value) and message in str(info.value)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="^path: .* does not exist"):
        read_text_pairs(tmp_path / "nope.tsv")


def test_container_validation() -> None:
    with pytest.raises(ValueError, match="^rows must hold"):
        TextPairs(())
    with pytest.raises(ValueError, match=r"^rows\[1\] has 3 cells"):
        TextPairs((("a", "b"), ("a", "b", "c")))
    with pytest.raises(TypeError, match=r"^rows\[0\] holds a int"):
        TextPairs((("a", 1),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^columns must be 2 distinct names"):
        TextPairs((("a", "b"),), ("x", "x"))
    with pytest.raises(ValueError, match=r"^rows\[0\] holds a NUL character"):
        TextPairs((("a", "b\x00"),))
