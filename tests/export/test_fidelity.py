"""The fidelity text set (stdlib docstring paragraphs the code corpus never reads) and the cosine of two exports."""

from __future__ import annotations

import os
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from contrastlab.data.text.code_corpus import build_code_corpus, normalise_text  # noqa: E402
from contrastlab.export import export_model, load_onnx, quantize_int8  # noqa: E402
from contrastlab.export.fidelity import docstring_paragraphs, export_cosines  # noqa: E402
from tests.models.text_models import write_tiny_bert  # noqa: E402


def test_paragraphs_are_fixed_prose_the_code_corpus_never_uses() -> None:
    texts = docstring_paragraphs(40, min_words=20, max_words=60)
    assert texts == docstring_paragraphs(40, min_words=20, max_words=60)  # a fixed set
    assert len(set(texts)) == 40
    assert all(20 <= len(t.split()) <= 60 and ">>>" not in t and t == " ".join(t.split()) for t in texts)
    queries = {normalise_text(p.query) for p in build_code_corpus().pairs}
    assert not queries & {normalise_text(t) for t in texts}
    assert docstring_paragraphs(10, min_words=20, max_words=60) == texts[:10]  # the first n of one order


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="^n must be a positive int"):
        docstring_paragraphs(0)
    with pytest.raises(ValueError, match=r"^min_words \(30\) must not exceed max_words \(20\)"):
        docstring_paragraphs(5, min_words=30, max_words=20)
    with pytest.raises(ValueError, match="^n: the standard library has"):
        docstring_paragraphs(10**7)


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fidelity")
    fp32 = export_model(str(write_tiny_bert(root / "st", "st")), root / "fp32")
    return fp32, quantize_int8(fp32, root / "int8")


TEXTS = ["x", "Return the square root of x.", "open a file and return a stream " * 4, "a b", "one more text here"]


def test_export_cosines_equal_a_loop_over_each_text(exports: tuple[Path, Path]) -> None:
    a, b = (load_onnx(p) for p in exports)
    got = export_cosines(a, b, TEXTS, batch_size=2)  # type: ignore[arg-type]
    assert got.shape == (len(TEXTS),) and got.dtype == np.float64
    # the reference: the same length-sorted batches of 2, each text's raw rows, cosine by its definition
    order = sorted(range(len(TEXTS)), key=lambda i: len(TEXTS[i]))
    for s in range(0, len(order), 2):
        idx = order[s : s + 2]
        x, y = (e.run_texts([TEXTS[i] for i in idx])[1].astype(np.float64) for e in (a, b))  # type: ignore[union-attr]
        for row, i in enumerate(idx):
            want = float(x[row] @ y[row]) / (float(np.sqrt(x[row] @ x[row])) * float(np.sqrt(y[row] @ y[row])))
            assert abs(got[i] - want) <= 1e-12
    same = export_cosines(a, a, TEXTS)  # type: ignore[arg-type]
    assert np.all(np.abs(same - 1.0) <= 1e-12)  # one export against itself: identical rows


def test_export_cosines_refuses_bad_input(exports: tuple[Path, Path]) -> None:
    a = load_onnx(exports[0])
    with pytest.raises(ValueError, match="^texts: no text"):
        export_cosines(a, a, [])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^batch_size must be a positive int"):
        export_cosines(a, a, TEXTS, batch_size=0)  # type: ignore[arg-type]
    other = types.SimpleNamespace(dim=a.dim + 1)
    with pytest.raises(ValueError, match="^other: gives 17-dimensional embeddings, the reference 16"):
        export_cosines(a, other, TEXTS)  # type: ignore[arg-type]
