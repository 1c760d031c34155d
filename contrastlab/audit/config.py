"""The settings of ``contrastlab audit``: one frozen dataclass, a docstring per field."""

from __future__ import annotations

from dataclasses import dataclass

from contrastlab.data.text.code_corpus import CODE_SOURCES, SPLITS

__all__ = ["AuditConfig", "QUICK"]


@dataclass(frozen=True)
class AuditConfig:
    """What to audit, on which pairs, and how much of it."""

    model: str = "minilm"
    """minilm (the bundled all-MiniLM-L6-v2), a sentence-transformers / Hugging Face folder or cached name, a contrastlab run folder, or a .npy of embeddings"""
    pairs: str | None = None
    """a TSV/CSV/JSONL file or saved datasets folder of (query, document) pairs; default: the docstring code corpus"""
    corpus_sources: tuple[str, ...] = ("stdlib",)
    """code corpus: where docstrings come from (stdlib, numpy, scipy, torch, sklearn)"""
    split: str = "test"
    """code corpus: the split whose queries are audited (the valid split fits the temperature)"""
    max_queries: int = 0
    """audit at most this many queries (and as many valid queries), a seeded draw; 0 = all"""
    max_documents: int = 0
    """search at most this many documents (the audited queries' own documents always included); 0 = all"""
    batch_size: int = 64
    """texts per encoder call"""
    max_seq_length: int = 0
    """tokens per text (longer texts are truncated); 0 = the model's own max_seq_length (all-MiniLM-L6-v2: 256), as the model was trained and published"""
    query_prompt: str | None = None
    """put before each query text before encoding (e.g. "query: "); null: the prompt the model records (a contrastlab run, its model folder, a sentence-transformers folder's "query" prompt), else none"""
    document_prompt: str | None = None
    """put before each document text before encoding (e.g. "passage: "); null: the prompt the model records (a run's "document" prompt), else none"""
    device: str = "cpu"
    """torch device of the encoder"""
    ks: tuple[int, ...] = (1, 5, 10, 100)
    """cut-offs of recall@k and nDCG@k; MRR is taken within the largest"""
    k_max: int = 1024
    """largest number of negatives k of the risk curve R(φ; k) (powers of two up to it)"""
    risk_temperature: float = 1.0
    """τ of the risk curve R(φ; k, τ); Prop. 1's O(1/k) constant grows like e^{4/τ}, so the curve is informative at τ ≈ 1"""
    tau_min: float = 0.005
    """smallest temperature of the held-out cross-entropy fit"""
    tau_max: float = 2.0
    """largest temperature of the held-out cross-entropy fit"""
    tail_anchors: int = 1024
    """queries in the hard-negative tail fits"""
    tail_documents: int = 8192
    """documents each tail query is compared with (a seeded draw)"""
    uniformity_sample: int = 4096
    """rows in the pairwise uniformity estimate (a seeded draw)"""
    n_boot: int = 1000
    """bootstrap resamples of each interval the audit bootstraps: the norm correlations and the norm paper's claims, and with task also every retrieval score's (nDCG, MAP, recall, precision, MRR at each cut-off) and the held-out cross-entropy's (--quick: 300)"""
    words: str | None = None
    """a UTF-8 file of words or short texts, one per line, whose norms are set against their wordfreq frequency (the norm paper's frequency claim); default: the built-in list"""
    norm_words: int = 2000
    """size of the built-in word list: words at evenly spaced ranks among wordfreq's 50,000 most frequent alphabetic English words"""
    seed: int = 0
    """seeds every draw of the audit"""
    progress: bool = True
    """show progress bars while encoding"""
    compress: bool = False
    """also run the compression audit: every prefix width × storage (float32, int8, binary, binary rescored, product quantizer) searched with the audited queries, documents and τ*"""
    compress_widths: tuple[int, ...] = ()
    """with compress: the prefix widths audited besides the full one, each at most the embedding width; empty = 256, 128, 64, 32 where smaller"""
    task: str | None = None
    """a retrieval task in BEIR's layout (a folder with corpus.jsonl, queries.jsonl, qrels/<split>.tsv): audit on its judged queries and whole corpus with graded metrics instead of on pairs"""
    task_split: str = "test"
    """with task: the qrels split whose queries are audited"""
    task_part: str = "all"
    """with task: audit all the split's queries, or only the train or dev part of the project's query holdout (contrastlab.tasks.holdout: a hash of each query id; tune on the train part, measure on the dev part)"""
    task_dev_fraction: float = 0.2
    """with task_part: the share of queries in the dev part"""
    task_holdout_seed: int = 0
    """with task_part: the seed of the holdout's hash"""
    top_k: int = 1000
    """with task: documents retrieved per query, the depth of the graded metrics (MTEB: 1,000)"""
    ignore_identical_ids: bool = False
    """with task: drop a retrieved document whose id equals the query's id (MTEB's option for tasks whose queries are also documents)"""
    compress_pq_bits: int = 0
    """with compress: bits per product-quantizer code, in [1, 16] (at least 39·2^bits documents to train on); 0 = the largest of 8, 6, 4 trainable on the documents searched"""

    def __post_init__(self) -> None:
        from contrastlab.config import check_fields

        check_fields(self)
        for name in (
            "max_queries",
            "max_documents",
            "batch_size",
            "max_seq_length",
            "k_max",
            "top_k",
            "tail_anchors",
            "tail_documents",
            "uniformity_sample",
            "n_boot",
            "norm_words",
            "seed",
            "task_holdout_seed",
        ):
            v = getattr(self, name)
            low = 0 if name in ("max_queries", "max_documents", "seed", "max_seq_length", "task_holdout_seed") else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        if self.task is not None and (not isinstance(self.task, str) or not self.task):
            raise ValueError(f"task must be a BEIR task folder, got {self.task!r}")
        if self.task_part not in ("all", "train", "dev"):
            raise ValueError(f"task_part must be one of all, train, dev, got {self.task_part!r}")
        if isinstance(self.task_dev_fraction, bool) or not 0 < self.task_dev_fraction < 1:
            raise ValueError(f"task_dev_fraction must be in (0, 1), got {self.task_dev_fraction!r}")
        if not isinstance(self.task_split, str) or not self.task_split:
            raise ValueError(f"task_split must be a split name, got {self.task_split!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model must be a non-empty string, got {self.model!r}")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        unknown = [s for s in self.corpus_sources if s not in CODE_SOURCES]
        if unknown or not self.corpus_sources:
            raise ValueError(f"corpus_sources: unknown {unknown}; known: {', '.join(CODE_SOURCES)}")
        if not self.ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.ks):
            raise ValueError(f"ks must be positive ints, got {self.ks!r}")
        if isinstance(self.risk_temperature, bool) or not self.risk_temperature > 0:
            raise ValueError(f"risk_temperature must be > 0, got {self.risk_temperature!r}")
        if any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in self.compress_widths):
            raise ValueError(f"compress_widths must be positive ints, got {self.compress_widths!r}")
        if len(set(self.compress_widths)) != len(self.compress_widths):
            raise ValueError(f"compress_widths must not repeat a width, got {self.compress_widths!r}")
        if not (self.compress_pq_bits == 0 or 1 <= self.compress_pq_bits <= 16):
            raise ValueError(f"compress_pq_bits must be 0 (automatic) or in [1, 16], got {self.compress_pq_bits!r}")
        if not 0 < self.tau_min < self.tau_max:
            raise ValueError(f"tau_min must satisfy 0 < tau_min < tau_max, got {self.tau_min}, {self.tau_max}")


QUICK = AuditConfig(max_queries=200, max_documents=2000, max_seq_length=64, k_max=512, n_boot=300)
"""A few minutes on two CPU cores: 200 queries against 2,000 documents, 64 tokens per text."""
