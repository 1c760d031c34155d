"""Text data, read with plain arguments (no job config): pairs, their keys and batches without false negatives.

``pairs`` pairs files (TSV, CSV, JSONL, a saved Hugging Face dataset) as :class:`TextPairs`; ``code_corpus``
docstring/definition pairs from installed Python; ``codes`` texts as code-point tensors; ``keys`` text
identity by token ids; ``conflict_free`` the conflict-free sampler and the false-negative mask;
``source_schedule`` which of several sources each step draws from; ``teacher_scores`` a teacher's scores file.
"""
