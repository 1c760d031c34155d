"""The prompts a text run records are read back by ``audit``, ``mine`` and ``encode``; an explicit prompt wins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from contrastlab import cli
from contrastlab.io import read_json_verified
from contrastlab.train import TrainConfig
from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig, LossConfig, TextDataConfig
from contrastlab.train.job.prompts import PromptsConfig
from contrastlab.train.job.runner import run_job
from tests.models.text_models import write_tiny_bert

pytest.importorskip("sentence_transformers")
WORDS = "alpha beta gamma delta search engine corpus shard model data softmax partition".split()
ROWS = [(f"what is {WORDS[i % 12]} item {i}", f"{WORDS[(i * 5) % 12]} item {i} of kind {i % 7}") for i in range(60)]
PROMPTS = PromptsConfig(query="query: ", document="passage: ")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """``(base model folder, a text run trained with PROMPTS, its pairs file)``."""
    root = tmp_path_factory.mktemp("prompts")
    bert = write_tiny_bert(root / "st", "st")
    pairs = root / "pairs.tsv"
    pairs.write_text("".join("\t".join(r) + "\n" for r in ROWS), encoding="utf-8")
    job = JobConfig(
        data=DataConfig(name="text", batch_size=4, text=TextDataConfig(path=str(pairs))),
        encoder=EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16, max_seq_length=24),
        loss=LossConfig(temperature=0.5),
        train=TrainConfig(steps=2, seed=0, progress=False, log_every=1, device="cpu"),
        eval=EvalConfig(n=3),
        prompts=PROMPTS,
    )
    run_job(job, root / "run")
    return bert, root / "run", pairs


def test_recorded_prompts_of_a_run_its_model_folder_and_other_models(world, tmp_path: Path) -> None:
    from contrastlab.audit.recorded_prompts import recorded_prompts, resolve_prompts

    bert, run, _ = world
    assert recorded_prompts(str(run)) == PROMPTS
    assert recorded_prompts(str(run / "model")) == PROMPTS
    assert recorded_prompts(str(bert)) == PromptsConfig()  # a folder that records none
    assert (
        recorded_prompts("minilm") == PromptsConfig() and recorded_prompts(str(tmp_path / "x.npy")) == PromptsConfig()
    )
    # a sentence-transformers folder names its document prompt as encode_document looks it up
    other = tmp_path / "e5"
    other.mkdir()
    (other / "config_sentence_transformers.json").write_text(
        json.dumps({"prompts": {"query": "q: ", "passage": "p: "}})
    )
    assert recorded_prompts(str(other)) == PromptsConfig(query="q: ", document="p: ")
    assert resolve_prompts(str(run), None, "") == ("query: ", "")  # an explicit prompt, even empty, wins
    (other / "config_sentence_transformers.json").write_text("{not json")
    with pytest.raises(ValueError, match="model: .*config_sentence_transformers.json"):
        recorded_prompts(str(other))


def _recording(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[tuple[str, str]]:
    """Wrap ``module.encode_texts`` to record ``(label, prompt)`` of each call."""
    seen: list[tuple[str, str]] = []
    real = module.encode_texts

    def wrapped(encoder, texts, **kwargs):
        seen.append((kwargs["label"], kwargs.get("prompt", "")))
        return real(encoder, texts, **kwargs)

    monkeypatch.setattr(module, "encode_texts", wrapped)
    return seen


def _audit(model: Path, pairs: Path, out: Path, *extra: str) -> dict[str, Any]:
    argv = ["audit", str(model), "--pairs", str(pairs), "--out", str(out), "--quiet", "--n_boot", "20"]
    assert cli.main([*argv, "--k_max", "16", "--norm_words", "50", *extra]) == 0
    return read_json_verified(out / "results.json")


def test_audit_of_a_run_uses_its_prompts_and_an_explicit_one_overrides(world, tmp_path, monkeypatch) -> None:
    from contrastlab.audit import run as audit_run

    _, run, pairs = world
    seen = _recording(monkeypatch, audit_run)
    results = _audit(run, pairs, tmp_path / "a")
    assert dict(seen) == {"queries": "query: ", "documents": "passage: "}
    assert (results["config"]["query_prompt"], results["config"]["document_prompt"]) == ("query: ", "passage: ")
    seen.clear()
    results = _audit(run / "model", pairs, tmp_path / "b", "--document_prompt", "", "--query_prompt", "Q ")
    assert dict(seen) == {"queries": "Q ", "documents": ""}
    assert (results["config"]["query_prompt"], results["config"]["document_prompt"]) == ("Q ", "")


def test_mine_with_a_run_uses_its_prompts_and_an_explicit_one_overrides(world, tmp_path, monkeypatch) -> None:
    from contrastlab.audit import inputs
    from contrastlab.mine import sidecar_path

    _, run, pairs = world
    seen = _recording(monkeypatch, inputs)
    out = tmp_path / "mined.tsv"
    assert cli.main(["mine", str(run), "--pairs", str(pairs), "--out", str(out), "--quiet"]) == 0
    assert dict(seen) == {"anchors": "query: ", "documents": "passage: "}
    assert read_json_verified(sidecar_path(out))["config"]["query_prompt"] == "query: "
    seen.clear()
    argv = ["mine", str(run / "model"), "--pairs", str(pairs), "--out", str(out), "--quiet", "--query_prompt", ""]
    assert cli.main(argv) == 0
    assert dict(seen) == {"anchors": "", "documents": "passage: "}
    assert read_json_verified(sidecar_path(out))["config"]["query_prompt"] == ""


@pytest.mark.parametrize("model", ["run", "model"])
def test_encode_of_a_run_uses_its_document_or_query_prompt(world, tmp_path: Path, model: str, capsys) -> None:
    from sentence_transformers import SentenceTransformer

    from contrastlab.search.store import EmbeddingStore

    _, run, _ = world
    name = str(run if model == "run" else run / "model")
    corpus = tmp_path / "corpus.txt"
    texts = [r[1] for r in ROWS[:9]]
    corpus.write_text("\n".join(texts) + "\n")

    def encode(store: str, *flags: str) -> EmbeddingStore:
        assert (
            cli.main(["encode", name, "--corpus", str(corpus), "--out", str(tmp_path / store), "--quiet", *flags]) == 0
        )
        return EmbeddingStore.open(tmp_path / store)

    documents = encode("d")
    assert "prompt: 'passage: ' before every text" in capsys.readouterr().out
    queries = encode("q", "--prompt-name", "query")
    assert "prompt: 'query: ' before every text" in capsys.readouterr().out
    plain = encode("n", "--prompt", "")
    assert "prompt:" not in capsys.readouterr().out
    assert documents.model["prompt"] == "passage: " and queries.model["prompt"] == "query: "
    assert "prompt" not in plain.model
    assert len({s.model["fingerprint"] for s in (documents, queries, plain)}) == 3
    st = SentenceTransformer(str(run / "model"), device="cpu")
    for store, prompt_name in ((documents, "document"), (queries, "query")):
        want = st.encode(texts, prompt_name=prompt_name, convert_to_tensor=True, normalize_embeddings=True).cpu()
        got = torch.nn.functional.normalize(torch.from_numpy(store.read_all()[1]), dim=1)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
