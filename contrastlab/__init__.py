"""contrastlab: InfoNCE and its modern variants, done exactly.

Train embedding models with the InfoNCE family (InfoNCE, DCL, NT-Xent, SupCon, WEINCE) and audit
them as similarity-search engines (the theory of Whiteley 2026, identifiability, tail statistics,
embedding norms). Embeddings are ``(N, D)`` tensors everywhere.
"""

__version__ = "0.1.0"
