import hashlib
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from contrastlab.audit import AuditConfig
from contrastlab.audit.hypernyms import HYPERNYM_PAIRS
from contrastlab.audit.run import audit
from contrastlab.cli import main
from tests._refused import assert_refused

wordfreq = pytest.importorskip("wordfreq")

FAST = {"progress": False, "n_boot": 200, "k_max": 64, "tail_documents": 1000, "norm_words": 600}
SPECIFIC = {s for s, _ in HYPERNYM_PAIRS}


def _unit(text: str, d: int = 16) -> np.ndarray:
    """A direction fixed by the text (its hash seeds it): near that of the number the text holds, if any, so
    that a query ("… number 12") and its document ("def f12(x)") are close and retrieval is partly right."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).normal(size=d)
    number = re.search(r"\d+", text)
    if number is not None:
        v = 0.5 * v + np.random.default_rng(int(number.group())).normal(size=d)
    return v / np.linalg.norm(v)


def _uniform(text: str) -> float:
    return int.from_bytes(hashlib.sha256(("norm " + text).encode()).digest()[:8], "little") / 2**64


class WorldEncoder:
    """A text model whose pre-normalisation norm is ``norm(text)``; one token per character (a tokenizer)."""

    def __init__(self, norm: Callable[[str], float], description: str) -> None:
        self.norm, self.description = norm, description

    def tokenize(self, texts: list[str]) -> dict[str, np.ndarray]:
        width = max(len(t) for t in texts)
        return {"attention_mask": np.array([[1] * len(t) + [0] * (width - len(t)) for t in texts])}

    def __call__(self, texts: list[str]) -> torch.Tensor:
        return torch.tensor(np.stack([self.norm(t) * _unit(t) for t in texts]), dtype=torch.float32)


def _zipf(text: str) -> float:
    known = [z for z in (wordfreq.zipf_frequency(w, "en") for w in wordfreq.tokenize(text, "en")) if z > 0]
    return float(np.mean(known)) if known else 0.0


WORLDS: dict[str, Callable[[str], float]] = {
    # the norm encodes frequency by construction (and a little noise fixed by the text)
    "frequency": lambda t: math.exp(0.3 * _zipf(t) + 0.1 * _uniform(t)),
    # the shuffled world: the norm is a pseudo-random value of the text, independent of its frequency
    "shuffled": lambda t: math.exp(_uniform(t)),
    # specificity by construction: the specific word of each hypernym pair gets a norm 1.5 times larger
    "specificity": lambda t: (1.5 if t in SPECIFIC else 1.0) * math.exp(0.05 * _uniform(t)),
}


def _pairs(tmp_path: Path) -> Path:
    words = ["cat", "dog", "theorem", "matrix", "sort", "file", "network", "string", "ocean", "violin"]
    lines = [f"how to {words[i % 10]} the {words[(i * 3) % 10]} number {i}\tdef f{i}(x)" for i in range(200)]
    (tmp_path / "pairs.tsv").write_text("\n".join(lines) + "\n")
    return tmp_path / "pairs.tsv"


def _audit_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, world: str, **extra: object) -> dict:
    import contrastlab.audit.run as run

    monkeypatch.setattr(run, "load_model", lambda cfg: WorldEncoder(WORLDS[world], f"the {world} world"))
    cfg = AuditConfig(pairs=str(_pairs(tmp_path)), **{**FAST, **extra})  # type: ignore[arg-type]
    return audit(cfg, tmp_path / f"out-{world}")


def test_a_model_whose_norm_encodes_frequency_shows_the_frequency_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = _audit_world(tmp_path, monkeypatch, "frequency")
    claims = res["norm_claims"]["claims"]
    assert claims["frequency"]["verdict"] == "shown" and claims["frequency"]["estimate"]["low"] > 0.5
    assert claims["frequency"]["estimate"]["n"] == 600  # the built-in list, every word known to wordfreq
    assert claims["specificity"]["verdict"] != "shown"  # specific words are rarer: smaller norms here
    assert res["norm_claims"]["words"]["kind"] == "builtin"
    assert res["metrics"]["norm_claim_frequency"] == claims["frequency"]["estimate"]["value"]
    assert "frequency shown" in res["summary"]
    assert any(t["title"].startswith("The norm paper's claims") for t in res["tables"])
    assert (tmp_path / "out-frequency" / "norm_claims.png").stat().st_size > 0
    assert "norm_claims.png" in [f["file"] for f in res["figures"]]


def test_a_model_whose_norm_is_shuffled_shows_no_claim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    res = _audit_world(tmp_path, monkeypatch, "shuffled")
    claims = res["norm_claims"]["claims"]
    assert {c: claims[c]["verdict"] for c in claims} == {c: "not shown" for c in claims}
    assert res["metrics"]["recall@1"] > 0.5 and claims["uncertainty"]["estimate"]["n"] == res["metrics"]["num_queries"]


def test_a_model_whose_norm_encodes_specificity_shows_the_specificity_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = _audit_world(tmp_path, monkeypatch, "specificity")
    spec = res["norm_claims"]["claims"]["specificity"]
    assert spec["verdict"] == "shown" and spec["estimate"]["n"] == len(HYPERNYM_PAIRS)
    assert spec["estimate"]["value"] == pytest.approx(math.log(1.5), abs=0.03)
    assert spec["details"]["sign_fraction"]["value"] > 0.95


def test_a_word_list_file_is_read_one_item_per_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    words = wordfreq.top_n_list("en", 400)[100::3]
    (tmp_path / "words.txt").write_text("\n".join(words) + "\nnew york city\n")
    res = _audit_world(tmp_path, monkeypatch, "frequency", words=str(tmp_path / "words.txt"))
    assert res["norm_claims"]["words"] == {
        "kind": "file",
        "path": str(tmp_path / "words.txt"),
        "items": len(words) + 1,
        "wordfreq": res["norm_claims"]["words"]["wordfreq"],
    }
    assert res["norm_claims"]["claims"]["frequency"]["estimate"]["n"] == len(words) + 1


def test_embeddings_without_a_text_model_leave_frequency_and_specificity_unmeasured(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    q = rng.normal(size=(200, 8)).astype(np.float32)
    np.save(tmp_path / "emb.npy", np.concatenate([q, q + rng.normal(size=(200, 8)).astype(np.float32)]))
    res = audit(AuditConfig(model=str(tmp_path / "emb.npy"), pairs=str(_pairs(tmp_path)), **FAST), tmp_path / "out")
    claims = res["norm_claims"]["claims"]
    assert claims["frequency"]["verdict"] == claims["specificity"]["verdict"] == "not measured"
    assert claims["uncertainty"]["verdict"] in ("shown", "not shown", "opposite")
    assert "norm_claims.png" not in [f["file"] for f in res["figures"]]  # nothing to draw


BAD_WORDS = {
    "an empty file": ("", "words: words.txt holds 0 line(s)"),
    "an empty line": ("cat\n\ndog\nfish\n", "words: words.txt line 2: empty line"),
    "a repeated word": ("cat\ndog\ncat\n", "words: words.txt line 3: 'cat' repeats line 1"),
    "a word wordfreq does not know": ("cat\nqxzvbt\ndog\n", "words: words.txt: 1 item(s) with no word wordfreq knows"),
}


@pytest.mark.parametrize("case", sorted(BAD_WORDS))
def test_cli_a_bad_word_list_is_one_line_naming_words_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    import contrastlab.audit.run as run

    def never(cfg: AuditConfig) -> None:
        raise AssertionError("the model was loaded before the word list was checked")

    monkeypatch.setattr(run, "load_model", never)
    content, expected = BAD_WORDS[case]
    (tmp_path / "words.txt").write_text(content)
    _pairs(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["audit", "--pairs", "pairs.tsv", "--words", "words.txt", "--out", "out", "--quiet"]
    assert_refused(capsys, argv, expected, tmp_path / "out")


def test_cli_a_missing_word_list_and_one_for_embeddings_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    np.save(tmp_path / "emb.npy", np.ones((400, 4), dtype=np.float32))
    _pairs(tmp_path)
    (tmp_path / "words.txt").write_text("cat\ndog\nfish\n")
    monkeypatch.chdir(tmp_path)
    assert main(["audit", "--pairs", "pairs.tsv", "--words", "nope.txt", "--out", "out", "--quiet"]) == 2
    assert "words: nope.txt is not a file" in capsys.readouterr().err
    assert main(["audit", "emb.npy", "--pairs", "pairs.tsv", "--words", "words.txt", "--out", "out", "--quiet"]) == 2
    assert "words: words.txt cannot be embedded" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_hypernym_pairs_follow_their_rules() -> None:
    words = [w for p in HYPERNYM_PAIRS for w in p]
    assert len(set(words)) == len(words) == 240  # every word in one pair only
    assert all(w.isalpha() and w.islower() and wordfreq.tokenize(w, "en") == [w] for w in words)
    assert all(wordfreq.zipf_frequency(w, "en") > 0 for w in words)
    assert sum(len(s) < len(g) for s, g in HYPERNYM_PAIRS) == 52  # the specific word is the shorter one
    assert sum(len(s) == len(g) for s, g in HYPERNYM_PAIRS) == 12
    zipf = {w: wordfreq.zipf_frequency(w, "en") for w in words}
    assert sum(zipf[s] < zipf[g] for s, g in HYPERNYM_PAIRS) == 82  # the confound the audit adjusts for


def test_the_builtin_word_list_spans_the_frequency_range() -> None:
    from contrastlab.audit.word_lists import builtin_words

    words = builtin_words(500)
    zipf = np.array([wordfreq.zipf_frequency(w, "en") for w in words])
    assert len(set(words)) == 500 and all(w.isascii() and w.isalpha() and len(w) >= 2 for w in words)
    assert words[0] == "the" and zipf.max() > 7 and zipf.min() < 3
    assert np.all(np.diff(zipf) <= 0.01)  # rank order: frequencies fall (wordfreq rounds them)
    with pytest.raises(ValueError, match="norm_words must be an int in"):
        builtin_words(2)


def test_the_word_list_reader_refuses_other_encodings_and_nul_bytes_naming_words(tmp_path: Path) -> None:
    from contrastlab.audit.word_lists import read_word_list

    (tmp_path / "utf16.txt").write_bytes("cat\ndog\nfish\n".encode("utf-16"))
    with pytest.raises(ValueError, match=r"^words: .*utf16.txt is in the wrong encoding"):
        read_word_list(tmp_path / "utf16.txt")
    (tmp_path / "nul.txt").write_bytes(b"cat\ndo\x00g\nfish\n")
    with pytest.raises(ValueError, match=r"^words: .*nul.txt line 2: holds a NUL byte"):
        read_word_list(tmp_path / "nul.txt")
    (tmp_path / "ok.txt").write_text("  cat \r\ndog\nnew york\n")  # spaces stripped, CRLF, a multi-word text
    assert read_word_list(tmp_path / "ok.txt") == ["cat", "dog", "new york"]


def test_token_counts_are_the_attention_masks_and_a_model_without_one_is_named() -> None:
    from contrastlab.audit.word_lists import token_counts

    enc = WorldEncoder(WORLDS["shuffled"], "a world")
    assert token_counts(enc, ["a", "abc", "ab"], batch_size=2).tolist() == [1, 3, 2]

    class NoMask:
        description = "a maskless model"

        def tokenize(self, texts: list[str]) -> dict[str, np.ndarray]:
            return {"input_ids": np.ones((len(texts), 2), dtype=np.int64)}

    with pytest.raises(ValueError, match="^model: a maskless model gives no attention_mask"):
        token_counts(NoMask(), ["a"])
