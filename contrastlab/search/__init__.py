"""Similarity search as a first-class engine: faiss-backed retrieval, full-corpus softmax search, metrics.

- :class:`EmbeddingIndex` — exact / IVF / HNSW search over ``(N, D)`` embeddings with ids and labels,
  recall against exact search, atomic save/load.
- Softmax search (Whiteley eqs 4–6): :func:`log_partition`, :func:`log_prob`, :func:`sample`,
  :func:`cross_entropy`, :func:`entropy`, all streamed over corpus blocks; :func:`topk_log_partition`
  bounds ``log Z`` from the top-k.
- :class:`ShardedSearch` — the same exact search and softmax search over a corpus split into shards
  (in this process, or one Ray actor per shard), merged exactly.
- Retrieval metrics, all computed by :mod:`contrastlab.search.graded`: :func:`recall_at_k`,
  :func:`precision_at_1`, :func:`map_at_r`, :func:`r_precision`, :func:`average_precision`, :func:`mrr`,
  :func:`ndcg_at_k` on hit matrices; :func:`evaluate_retrieval` of a labelled index.
"""

from contrastlab.search.evaluate import evaluate_retrieval
from contrastlab.search.graded import hits_from_labels
from contrastlab.search.index import EmbeddingIndex, IndexFormatError, SearchResult
from contrastlab.search.metrics import (
    average_precision,
    map_at_r,
    mrr,
    ndcg_at_k,
    precision_at_1,
    r_precision,
    recall_at_k,
)
from contrastlab.search.mining import MinedNegatives, mine_hard_negatives, per_anchor_negatives
from contrastlab.search.sharded import ShardedSearch
from contrastlab.search.softmax import (
    NpyBlocks,
    SoftmaxSearch,
    TopKLogPartition,
    cross_entropy,
    entropy,
    log_partition,
    log_prob,
    sample,
    topk_log_partition,
)

__all__ = [
    "MinedNegatives",
    "mine_hard_negatives",
    "per_anchor_negatives",
    "EmbeddingIndex",
    "IndexFormatError",
    "SearchResult",
    "ShardedSearch",
    "NpyBlocks",
    "SoftmaxSearch",
    "TopKLogPartition",
    "log_partition",
    "log_prob",
    "sample",
    "cross_entropy",
    "entropy",
    "topk_log_partition",
    "hits_from_labels",
    "recall_at_k",
    "precision_at_1",
    "r_precision",
    "map_at_r",
    "average_precision",
    "mrr",
    "ndcg_at_k",
    "evaluate_retrieval",
]
