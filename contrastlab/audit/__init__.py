"""``contrastlab audit``: the four papers' diagnostics on any embedding model, real text included.

:func:`audit` takes an :class:`AuditConfig` (a model: the bundled MiniLM, a sentence-transformers or
Hugging Face folder, a contrastlab run, or a ``.npy`` of embeddings; pairs: the docstring code corpus or
a file) and writes a run folder with results.json, figures and report.html. ``audit`` is imported on
first use, so reading the config (as the command line's ``--help`` does) stays light; so is
:func:`audit_tasks`, one model on several retrieval tasks (:mod:`contrastlab.audit.task_suite`).
"""

from typing import Any

from contrastlab.audit.config import QUICK, AuditConfig

__all__ = ["AuditConfig", "QUICK", "audit", "audit_tasks"]


def __getattr__(name: str) -> Any:
    if name == "audit":
        from contrastlab.audit.run import audit

        return audit
    if name == "audit_tasks":
        from contrastlab.audit.task_suite import audit_tasks

        return audit_tasks
    raise AttributeError(f"module 'contrastlab.audit' has no attribute {name!r}")
