"""Reading a retrieval task in BEIR's layout into the audit's inputs, and MTEB's layout of its scores.

The audit (:mod:`contrastlab.audit.run`) runs the same stages on every source: a task's judged queries
and its whole corpus, with several relevant documents per query and graded judgements, or pairs (one
document of grade 1 per query). What is particular to a task:

* **retrieval** — the top ``top_k`` (MTEB: 1,000) documents of every query by cosine, ranked as trec_eval
  ranks them (score decreasing, equal scores by document id decreasing; :mod:`contrastlab.search.graded`),
  then MTEB's retrieval scores — nDCG, MAP, recall, precision and MRR at 1, 3, 5, 10, 20, 100 and 1,000 —
  each with a 95% percentile-bootstrap interval over queries (:func:`contrastlab.eval.bootstrap.bootstrap_mean`).
  Queries are embedded as they are, documents as ``(title + " " + text).strip()``, each truncated at the
  model's own ``max_seq_length`` unless the config says otherwise: MTEB's conventions, so the scores sit
  beside the MTEB results repository's (``mteb_results.json``, its layout).
* **the softmax search** — τ* is fitted by two-fold cross-fitting: a SHA-256 of the audit's seed and each
  query id puts the query in fold A or B; τ*_A minimises the mean cross-entropy of fold A's queries, τ*_B
  fold B's, and each query is then scored at the *other* fold's τ, so no query's cross-entropy, log-partition,
  entropy or top-1 probability uses a τ fitted on it. A query's cross-entropy is
  ``−(1/|R_q|) Σ_{d ∈ R_q} log P_τ(d | q)``, P_τ the softmax search over the whole corpus and R_q its
  documents of grade > 0 (SupCon's L_out, Khosla et al. 2020, arXiv:2004.11362), each query weighing
  the same in the fit.
* **risk, tails, geometry, norms** — on the (query, relevant document) pairs, with a query's other relevant
  documents never among its negatives and per-pair values averaged within a query first
  (:func:`contrastlab.audit.diagnostics.risk_curve` states the multi-positive risk); "a right top-1"
  meaning a first-ranked document of grade > 0.
* **compression** (``compress``) — on the (query, relevant document) pairs: R@k of each pair's document,
  the query's other relevant documents included in the ranking.

``max_queries`` and ``max_documents`` audit a seeded subset (every judged document of the kept queries is
searched); the summary then says the scores are not comparable with published ones.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contrastlab.audit.config import AuditConfig
from contrastlab.audit.norm_audit import WordSet, load_words
from contrastlab.search.graded import Judgements, judgements, mteb_name
from contrastlab.tasks import RetrievalTask, holdout, read_beir_task

__all__ = [
    "MTEB_KS",
    "MEASURES",
    "HEADLINE",
    "TaskInputs",
    "task_inputs",
    "task_identity",
    "mteb_results",
]

MTEB_KS = (1, 3, 5, 10, 20, 100, 1000)
"""The cut-offs of MTEB's retrieval scores."""

MEASURES = tuple(f"{kind}.{k}" for kind in ("ndcg_cut", "map_cut", "recall", "P", "mrr_cut") for k in MTEB_KS)
"""trec_eval's names of every score the task audit computes (MTEB's full retrieval set)."""

HEADLINE = ("ndcg_cut.10", "map_cut.100", "recall.100", "mrr_cut.10", "P.1")
"""The scores in the summary and the first table (nDCG@10 is MTEB's main score)."""


@dataclass(frozen=True)
class TaskInputs:
    """The inputs stage of every audit: the task, the model, and whose τ is fitted where.

    Attributes:
        task: the task, cut to the audited queries and the searched documents (pairs: one document of
            grade 1 per query).
        encoder: the text model, or ``None`` when the embeddings are given (a ``.npy``) or not loaded yet.
        documents: ``(M,)`` positions in the source of the documents searched, sorted.
        judged: the audited queries' judgements over the searched documents.
        pair_query: ``(P,)`` the query of each (query, document of grade > 0) pair.
        pair_doc: ``(P,)`` its document's position among the searched documents.
        exclude: ``(P, E)`` each pair's query's relevant documents, padded with ``M``.
        fold: ``(Q,)`` 0 or 1, each query's cross-fitting fold; ``None``: τ is fitted on ``fit_texts``.
        words: the norm paper's word list.
        subset: whether queries or documents were capped (scores not comparable with published ones).
        pairs: the pairs the task was made of (:class:`~contrastlab.audit.run.AuditInputs`), ``None`` for a task.
        fit_doc: ``(V,)`` the documents of the queries that only fit τ (pairs: the valid split), after the
            audited ones in the embedded queries.
    """

    task: RetrievalTask
    encoder: Any
    documents: np.ndarray
    judged: Judgements
    pair_query: np.ndarray
    pair_doc: np.ndarray
    exclude: np.ndarray
    fold: np.ndarray | None
    words: WordSet | None
    subset: bool
    pairs: Any = None
    fit_doc: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _fold(query_id: str, seed: int) -> int:
    """0 or 1 from a SHA-256 of the seed and the query id: the same on every machine."""
    return hashlib.sha256(f"tau-fold\x1f{seed}\x1f{query_id}".encode()).digest()[0] & 1


def load_task_inputs(cfg: AuditConfig, rng: np.random.Generator) -> TaskInputs:
    """Inputs stage: read the task and the word list, draw the audited subset; bad input fails here.

    The model is loaded by the audit after this (``encoder`` is ``None``): a task's defect fails first.
    """
    assert cfg.task is not None
    if cfg.pairs is not None:
        raise ValueError("pairs: give a task or a pairs file, not both")
    task = read_beir_task(cfg.task, cfg.task_split)
    if cfg.task_part != "all":
        train, dev = holdout(task, cfg.task_dev_fraction, seed=cfg.task_holdout_seed)
        task = train if cfg.task_part == "train" else dev
    if Path(cfg.model).suffix == ".npy":
        raise ValueError("model: a task is audited with a text model (its texts are embedded), not a .npy")
    words = load_words(cfg, has_text_model=True)
    q_keep = np.arange(len(task.query_ids))
    if 0 < cfg.max_queries < q_keep.size:
        q_keep = np.sort(rng.choice(q_keep, size=cfg.max_queries, replace=False))
    ids = tuple(task.query_ids[i] for i in q_keep)
    doc_pos = task.doc_index()
    docs = np.arange(len(task.doc_ids))
    if 0 < cfg.max_documents < docs.size:
        needed = np.unique([doc_pos[d] for q in ids for d in task.qrels[q]])
        rest = np.setdiff1d(docs, needed)
        extra = rng.choice(rest, size=max(0, min(rest.size, cfg.max_documents - needed.size)), replace=False)
        docs = np.sort(np.concatenate([needed, extra]))
    subset = q_keep.size < len(task.query_ids) or docs.size < len(task.doc_ids)
    if subset:
        task = RetrievalTask(
            name=task.name,
            split=task.split,
            doc_ids=tuple(task.doc_ids[j] for j in docs),
            doc_texts=tuple(task.doc_texts[j] for j in docs),
            query_ids=ids,
            query_texts=tuple(task.query_texts[i] for i in q_keep),
            qrels={q: task.qrels[q] for q in ids},
            provenance={
                **task.provenance,
                "subset": {"queries": len(ids), "documents": int(docs.size), "of_fingerprint": task.fingerprint()},
            },
        )
    fold = np.array([_fold(q, cfg.seed) for q in task.query_ids], dtype=np.int64)
    return task_inputs(task, documents=docs, fold=fold, words=words, subset=subset)


def task_inputs(task: RetrievalTask, **fields: Any) -> TaskInputs:
    """The audit's inputs on ``task``: its judgements and its (query, relevant document) pairs, and ``fields``.

    Raises:
        ValueError: no query has a document of grade > 0.
    """
    judged = judgements(task.qrels, task.query_ids, task.doc_ids)
    pos = task.doc_index()
    rel_sets = [sorted(pos[d] for d in task.relevant(q)) for q in task.query_ids]
    if not any(rel_sets):
        raise ValueError(f"task: no query of {task.name} ({task.split}) has a document of grade > 0 to retrieve")
    width = max(len(r) for r in rel_sets)
    m = len(task.doc_ids)
    pair_query = np.array([i for i, r in enumerate(rel_sets) for _ in r], dtype=np.int64)
    pair_doc = np.array([d for r in rel_sets for d in r], dtype=np.int64)
    exclude = np.array([rel_sets[i] + [m] * (width - len(rel_sets[i])) for i in pair_query], dtype=np.int64)
    fields.setdefault("encoder", None)
    return TaskInputs(task=task, judged=judged, pair_query=pair_query, pair_doc=pair_doc, exclude=exclude, **fields)


def task_identity(task: RetrievalTask) -> dict[str, Any]:
    """What a comparison checks before it pairs two audits: task, split, queries, corpus and judgements."""

    def digest(obj: Any) -> str:
        import json

        return hashlib.sha256(json.dumps(obj, ensure_ascii=False, sort_keys=True).encode()).hexdigest()

    return {
        "name": task.name,
        "split": task.split,
        "queries": digest(list(task.query_ids)),
        "corpus": digest([list(task.doc_ids), list(task.doc_texts)]),
        "qrels": digest({q: sorted(v.items()) for q, v in task.qrels.items()}),
        "fingerprint": task.fingerprint(),
    }


def mteb_results(
    task: RetrievalTask, means: dict[str, float], *, evaluation_time: float, model: str, subset: bool
) -> dict[str, Any]:
    """The task's scores in MTEB's results-JSON layout (``scores[split][0]`` with ``ndcg_at_10``, …).

    ``main_score`` is nDCG@10, as MTEB's retrieval tasks have it. ``dataset_revision`` is the task's
    content fingerprint (a folder on disk has no Hugging Face revision).
    """
    import contrastlab

    scores: dict[str, Any] = {"hf_subset": "default", "languages": [], "main_score": means["ndcg_cut_10"]}
    for m in MEASURES:
        scores[mteb_name(m)] = means[m.replace(".", "_")]
    return {
        "dataset_revision": task.fingerprint(),
        "task_name": task.name,
        "mteb_version": None,
        "evaluation_time": evaluation_time,
        "kg_co2_emissions": None,
        "scores": {task.split: [scores]},
        "model_name": model,
        "written_by": f"contrastlab {contrastlab.__version__}",
        "comparable": not subset,
    }
