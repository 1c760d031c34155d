"""Retrieval metrics on a dev set during training: :class:`DevSet`, :func:`read_dev`, :func:`retrieval_metrics`.

A dev set is queries, documents and each query's relevant documents with their grades. The model embeds
both (with the run's prompts, :class:`~contrastlab.train.job.prompts.PromptsConfig`), every query searches
every document exactly (cosine when the loss normalises, else the dot product), and the metrics of
:data:`~contrastlab.train.job.select.RETRIEVAL_METRIC` are averaged over the queries:

* ``ndcg@K`` — graded nDCG with gains ``grade / log2(rank + 1)`` and the ideal ranking of the query's
  judged grades (trec_eval's ``ndcg_cut.K``; with grades 1 it is the binary nDCG of
  :func:`contrastlab.search.metrics.ndcg_at_k`);
* ``recall@K`` — the share of the query's relevant documents in the top K (trec_eval's ``recall.K``);
* ``mrr@K`` — the reciprocal rank of the first relevant document within the top K (0 if none; MTEB's
  ``mrr_at_K``).

They are computed by :func:`contrastlab.search.graded.graded_metrics` (equal to trec_eval), equal scores
ordered by document id decreasing as trec_eval orders them (a task's ids; a pairs file's row positions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from contrastlab.config import ConfigError
from contrastlab.train.job.config import JobConfig
from contrastlab.train.job.data_source import DataSource
from contrastlab.train.job.select import RETRIEVAL_METRIC, DevConfig, Selector

__all__ = [
    "DevSet",
    "dev_from_pairs",
    "read_dev",
    "retrieval_metrics",
    "embed_texts",
    "dev_evaluator",
    "build_dev",
    "with_dev_metrics",
    "DEFAULT_METRICS",
]

DEFAULT_METRICS = ("ndcg@10", "recall@10", "mrr@10")
"""The retrieval metrics every dev evaluation reports (the selected metric besides)."""


@dataclass(frozen=True)
class DevSet:
    """Queries, documents and the relevant documents of each query.

    Attributes:
        queries: the query texts.
        documents: the document texts (the corpus searched).
        relevant: per query, ``{document index: grade > 0}``, at least one entry each.
        name: where it came from (for logs).
        doc_ids: the documents' ids (a task's; trec_eval orders equal scores by them), or None (positions).
        query_ids: the queries' ids (a task's), or None (positions).
    """

    queries: tuple[str, ...]
    documents: tuple[str, ...]
    relevant: tuple[dict[int, int], ...]
    name: str
    doc_ids: tuple[str, ...] | None = None
    query_ids: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.queries or len(self.relevant) != len(self.queries):
            raise ValueError(f"a dev set needs queries, each with relevant documents; got {len(self.queries)}")
        for q, rel in enumerate(self.relevant):
            if not rel or any(g <= 0 or not 0 <= d < len(self.documents) for d, g in rel.items()):
                raise ValueError(f"relevant[{q}] must map document indices to grades > 0, got {rel}")


def dev_from_pairs(rows: Sequence[Sequence[str]], name: str) -> DevSet:
    """The dev set of text rows (anchor, positive[, negatives…]).

    Queries are the distinct anchors, documents the distinct positives and negatives, a query's relevant
    documents the positives of its rows (grade 1).
    """
    queries: dict[str, int] = {}
    documents: dict[str, int] = {}
    relevant: list[dict[int, int]] = []
    for r in rows:
        q = queries.setdefault(r[0], len(queries))
        if q == len(relevant):
            relevant.append({})
        relevant[q][documents.setdefault(r[1], len(documents))] = 1
        for t in r[2:]:
            documents.setdefault(t, len(documents))
    return DevSet(tuple(queries), tuple(documents), tuple(relevant), name)


def read_dev(config: DevConfig, root: str | None = None) -> DevSet:
    """The dev set ``config`` names (``path`` must be set; a relative one is under ``root``, ``data.root``).

    Raises:
        contrastlab.train.ConfigError: naming ``select.dev.path`` for a file or folder that does not read.
    """
    assert config.path is not None
    path = config.path if root is None or Path(config.path).is_absolute() else str(Path(root) / config.path)
    if config.kind == "pairs":
        from contrastlab.data.text.pairs import read_text_pairs

        try:
            pairs = read_text_pairs(path, header=config.header)
        except ValueError as e:
            raise ConfigError(f"select.dev.path: {str(e).removeprefix('path: ')}") from None
        return dev_from_pairs(pairs.rows, pairs.name)
    from contrastlab.tasks import holdout, read_beir_task

    try:
        task = read_beir_task(path, split=config.split)
    except ValueError as e:
        raise ConfigError(f"select.dev.path: {str(e).removeprefix('path: ')}") from None
    if config.part == "dev":
        task = holdout(task, dev_fraction=config.dev_fraction, seed=config.seed)[1]
    doc_index = {d: i for i, d in enumerate(task.doc_ids)}
    relevant = [{doc_index[d]: g for d, g in task.relevant(q).items()} for q in task.query_ids]
    keep = [i for i, rel in enumerate(relevant) if rel]
    if not keep:
        raise ConfigError(
            f"select.dev.path: {config.path} split {config.split!r} has no query with a relevant document"
        )
    return DevSet(
        tuple(task.query_texts[i] for i in keep),
        tuple(task.doc_texts),
        tuple(relevant[i] for i in keep),
        f"{task.name}/{task.split}/{config.part}",
        doc_ids=tuple(task.doc_ids),
        query_ids=tuple(task.query_ids[i] for i in keep),
    )


def embed_texts(model: nn.Module, texts: Sequence[str], prompt: str, rows: int = 64) -> Tensor:
    """``(len(texts), D)`` float32 embeddings of ``prompt + text``, in blocks of ``rows``.

    ``model`` is a text encoder, or a model whose ``encoder`` is one (the representation is embedded).
    """
    text_encoder: Any = getattr(model, "encoder", model)  # a TransformerTextEncoder
    embed = text_encoder.embed_texts
    return torch.cat([embed([prompt + t for t in texts[i : i + rows]]).float() for i in range(0, len(texts), rows)])


def _measure(name: str) -> str:
    """trec_eval's measure of a dev metric name (``ndcg@10`` → ``ndcg_cut.10``, ``recall@K``, ``mrr@K`` alike).

    Raises:
        ValueError: a name that is not ``ndcg@K``, ``recall@K`` or ``mrr@K``.
    """
    m = RETRIEVAL_METRIC.match(name)
    if m is None:
        raise ValueError(f"names: {name!r} is not ndcg@K, recall@K or mrr@K")
    return f"{_TREC[m.group(1)]}.{m.group(2)}"


_TREC = {"ndcg": "ndcg_cut", "recall": "recall", "mrr": "mrr_cut"}


def retrieval_metrics(
    queries: Tensor,
    documents: Tensor,
    relevant: Sequence[dict[int, int]],
    names: Sequence[str],
    *,
    normalize: bool,
    doc_ids: Sequence[str] | None = None,
    per_query: bool = False,
) -> dict[str, Any]:
    """Each metric of ``names`` over the queries, by :func:`contrastlab.search.graded.graded_metrics`.

    Every query's documents are ranked by score (float64), equal scores by document id decreasing, as
    trec_eval ranks them; the top ``max K`` are scored.

    Shape:
        queries: ``(Q, D)``; documents: ``(M, D)``; ``relevant`` has ``Q`` entries.

    Args:
        queries: query embeddings.
        documents: document embeddings.
        relevant: per query, ``{document position: grade}``.
        names: ``ndcg@K``, ``recall@K``, ``mrr@K``.
        normalize: cosine similarity (else the dot product).
        doc_ids: the documents' ids (trec_eval's tie order); default their positions as strings.
        per_query: return ``(Q,)`` arrays instead of means.

    Returns:
        name → the mean over queries (a float), or the ``(Q,)`` per-query values with ``per_query``.

    Raises:
        ValueError: a name that is not ``ndcg@K``, ``recall@K`` or ``mrr@K``; mismatched shapes.
    """
    from contrastlab.search.graded import graded_metrics, judgements, tie_keys

    measures = {name: _measure(name) for name in names}
    if queries.ndim != 2 or documents.ndim != 2 or queries.shape[1] != documents.shape[1]:
        raise ValueError(
            f"queries (Q, D) and documents (M, D) must share D, got {tuple(queries.shape)}, {tuple(documents.shape)}"
        )
    if len(relevant) != queries.shape[0]:
        raise ValueError(f"relevant must have one entry per query ({queries.shape[0]}), got {len(relevant)}")
    ids = [str(i) for i in range(documents.shape[0])] if doc_ids is None else list(doc_ids)
    q, d = queries.double(), documents.double()
    if normalize:
        q, d = torch.nn.functional.normalize(q, dim=1), torch.nn.functional.normalize(d, dim=1)
    depth = min(max(int(m.rsplit(".", 1)[1]) for m in measures.values()), d.shape[0])
    scores = q @ d.T  # (Q, M)
    top_scores, top = torch.topk(scores, depth, dim=1)  # (Q, depth); ties at the cut resolved by graded's order
    qids = [str(i) for i in range(len(relevant))]
    qrels = {qid: {ids[doc]: g for doc, g in rel.items()} for qid, rel in zip(qids, relevant, strict=True)}
    judged = judgements(qrels, qids, ids)
    per = graded_metrics(
        top.cpu().numpy(), judged, list(measures.values()), scores=top_scores.cpu().numpy(), ties=tie_keys(ids)
    )
    out: dict[str, Any] = {}
    for name, measure in measures.items():
        values = per[measure.replace(".", "_")]
        out[name] = values if per_query else float(values.mean())
    return out


def dev_evaluator(
    dev: DevSet, names: Sequence[str], *, query_prompt: str, document_prompt: str, normalize: bool
) -> Callable[[nn.Module], dict[str, float]]:
    """``model -> {metric: value}`` on ``dev`` (the model in eval mode, under ``no_grad``, as the trainer calls it)."""
    wanted = tuple(dict.fromkeys([*DEFAULT_METRICS, *names]))

    def evaluate(model: nn.Module) -> dict[str, float]:
        q = embed_texts(model, dev.queries, query_prompt)
        d = embed_texts(model, dev.documents, document_prompt)
        return retrieval_metrics(q, d, dev.relevant, wanted, normalize=normalize, doc_ids=dev.doc_ids)

    return evaluate


def build_dev(config: JobConfig, source: DataSource) -> DevSet | None:
    """The dev set of ``config.select``: ``select.dev.path``, else the held-out rows of a text source.

    None when the selected metric is not a retrieval metric and no dev path is given.

    Raises:
        contrastlab.train.ConfigError: a dev set that does not read, or a retrieval metric on data that is
            not text with no ``select.dev.path`` (named).
    """
    sel = config.select
    if sel.dev.path is not None:
        return read_dev(sel.dev, config.data.root)
    if sel.metric is None or RETRIEVAL_METRIC.match(sel.metric) is None:
        return None
    if source.kind != "texts":
        raise ConfigError(
            f"select.metric {sel.metric!r} ranks texts: data.name {config.data.name!r} gives {source.kind}; "
            "use select.metric loss, or text data"
        )
    from contrastlab.data.text.codes import codes_to_texts

    held = source.eval_batch
    q, d = config.prompts.query, config.prompts.document
    anchors = [t[len(q) :] for t in codes_to_texts(held["anchor"])]  # the held-out rows, without their prompts
    positives = [t[len(d) :] for t in codes_to_texts(held["positive"])]
    return dev_from_pairs(list(zip(anchors, positives, strict=True)), "held-out rows")


def with_dev_metrics(
    config: JobConfig,
    dev: DevSet | None,
    eval_fn: Callable[[nn.Module, int], dict[str, float]],
    selector: Selector | None,
) -> Callable[[nn.Module, int], dict[str, float]]:
    """``eval_fn`` plus the retrieval metrics on ``dev`` (when given), each evaluation recorded by ``selector``."""
    metric = config.select.metric
    names = [metric] if metric is not None and RETRIEVAL_METRIC.match(metric) else []
    dev_metrics = (
        None
        if dev is None
        else dev_evaluator(
            dev, names, query_prompt=config.prompts.query, document_prompt=config.prompts.document,
            normalize=config.loss.normalize,
        )
    )  # fmt: skip

    def evaluate(model: nn.Module, step: int) -> dict[str, float]:
        out = eval_fn(model, step)
        if dev_metrics is not None:
            out.update(dev_metrics(model))
        if selector is not None:
            selector.update(step, out)
        return out

    return evaluate
