import ast
import textwrap
from pathlib import Path

import pytest

from contrastlab.data.text import code_corpus as cc


@pytest.fixture(scope="module")
def stdlib_corpus() -> cc.CodeCorpus:
    return cc.build_code_corpus()


def test_stdlib_corpus_size_and_provenance(stdlib_corpus: cc.CodeCorpus) -> None:
    prov = stdlib_corpus.provenance
    # thousands of documented public definitions in any CPython 3.10+ standard library
    assert len(stdlib_corpus) > 3000
    assert prov["pairs"] == len(stdlib_corpus) == sum(prov["splits"].values())
    assert prov["sources"]["stdlib"]["version"] == prov["python"]
    removed = sum(prov["duplicates_removed"].values())
    assert prov["candidates"] == prov["pairs"] + removed
    assert len(prov["sha256"]) == 64


def test_every_pair_is_unique_after_normalisation(stdlib_corpus: cc.CodeCorpus) -> None:
    queries = [cc.normalise_text(p.query) for p in stdlib_corpus.pairs]
    positives = [cc.normalise_text(p.positive) for p in stdlib_corpus.pairs]
    assert len(set(queries)) == len(queries) and len(set(positives)) == len(positives)


def test_splits_follow_the_hash_of_the_qualified_name(stdlib_corpus: cc.CodeCorpus) -> None:
    cfg = cc.CodeCorpusConfig()
    for p in stdlib_corpus.pairs[:500]:
        assert p.split == cc.split_of(p.qualname, salt=cfg.salt)
    sizes = stdlib_corpus.provenance["splits"]
    n = len(stdlib_corpus)
    for name, frac in (("test", 0.1), ("valid", 0.1)):
        # a Binomial(n, 0.1) count: 6 standard deviations either side
        assert abs(sizes[name] - frac * n) <= 6 * (n * frac * (1 - frac)) ** 0.5
    assert {p.split for p in stdlib_corpus.split("test")} == {"test"}
    pairs = stdlib_corpus.text_pairs("test")
    assert len(pairs) == sizes["test"] and pairs.columns == ("query", "positive")


def test_positives_parse_as_python_headers(stdlib_corpus: cc.CodeCorpus) -> None:
    for p in stdlib_corpus.pairs[:300]:
        header = p.positive.replace(p.qualname, p.qualname.rsplit(".", 1)[-1], 1)
        ast.parse(header + ":\n    pass")
        assert len(p.query.split()) >= 3 and "\n" not in p.query


def test_build_is_reproducible(stdlib_corpus: cc.CodeCorpus) -> None:
    again = cc.build_code_corpus()
    assert again.provenance["sha256"] == stdlib_corpus.provenance["sha256"]
    assert again.pairs == stdlib_corpus.pairs


def test_a_hand_made_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cc.CODE_SOURCES, "toypkg", "toypkg")  # a package that is not installed as a distribution
    pkg = tmp_path / "toypkg"
    (pkg / "tests").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            '''
            def area(r: float) -> float:
                """Area of a circle of radius r.

                More detail that is not part of the query.
                """

            def _hidden(x):
                """A private helper function here."""

            def short():
                """Too short."""

            class Shape(Base, metaclass=Meta):
                """A geometric shape in the plane."""

                def grow(self, k=2):
                    """Area of a circle of radius r."""

                async def wait(self, *, t):
                    """Wait for the shape to settle down."""
            '''
        )
    )
    (pkg / "tests" / "__init__.py").write_text('def test_x():\n    """A test that is never read."""\n')
    (pkg / "broken.py").write_text("def (:\n")
    (pkg / "_private.py").write_text('def f():\n    """A private module is not read."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    corpus = cc.build_code_corpus(cc.CodeCorpusConfig(sources=("toypkg",)))
    got = {p.qualname: (p.query, p.positive) for p in corpus.pairs}
    assert got == {
        # area and Shape.grow share a query: the first in sorted qualified-name order stays ("S" < "a")
        "toypkg.Shape.grow": ("Area of a circle of radius r.", "def toypkg.Shape.grow(self, k=2)"),
        "toypkg.Shape": ("A geometric shape in the plane.", "class toypkg.Shape(Base, metaclass=Meta)"),
        "toypkg.Shape.wait": ("Wait for the shape to settle down.", "async def toypkg.Shape.wait(self, *, t)"),
    }
    stats = corpus.provenance["sources"]["toypkg"]
    assert stats["unparsable_files"] == 1 and stats["dropped_short"] == 1 and stats["private_module_files"] == 1
    assert stats["version"] is None  # no distribution metadata for the toy package
    assert corpus.provenance["duplicates_removed"]["normalised_query"] == 1
    private = cc.build_code_corpus(cc.CodeCorpusConfig(sources=("toypkg",), include_private=True))
    assert "toypkg._hidden" in {p.qualname for p in private.pairs}


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="^sources: unknown source"):
        cc.CodeCorpusConfig(sources=("nope",))
    with pytest.raises(ValueError, match="^sources must be a non-empty tuple"):
        cc.CodeCorpusConfig(sources=cc.CODE_SOURCES)  # type: ignore[arg-type]  # a dict of names, not a tuple
    with pytest.raises(ValueError, match="^test_fraction must be"):
        cc.CodeCorpusConfig(test_fraction=1.5)
    with pytest.raises(ValueError, match="^test_fraction \\+ valid_fraction"):
        cc.CodeCorpusConfig(test_fraction=0.6, valid_fraction=0.5)
    with pytest.raises(ValueError, match="^min_words must be"):
        cc.CodeCorpusConfig(min_words=0)
    with pytest.raises(ValueError, match="^split must be one of"):
        cc.CodeCorpus(()).split("dev")
