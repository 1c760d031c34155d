"""Beyond one machine: the engine switch (one process or Ray) and the work that grows with the corpus.

- :mod:`contrastlab.scale.cluster` — :class:`Engine` (``--engine local|ray``, ``--address``) and
  :func:`ray_session`, the one place that starts or connects to Ray (loopback only, no dashboard, no usage
  reporting, temp files inside the run's folder).
- :mod:`contrastlab.scale.corpus` — :class:`~contrastlab.scale.corpus.TextCorpus`, the corpus format of
  ``contrastlab encode`` (a file of one document per line, or a folder of ``*.txt`` files).
- :mod:`contrastlab.scale.encode` — :func:`~contrastlab.scale.encode.encode_corpus`: a corpus into an
  embedding store (:mod:`contrastlab.search.store`), in one process or with Ray Data actors, resumable.

Ray is optional (``pip install 'contrastlab[ray]'``) and imported only when an engine needs it.
"""

from contrastlab.scale.cluster import ENGINES, RAY_EXTRA, Engine, EngineError, add_engine_arguments, ray_session

__all__ = ["ENGINES", "RAY_EXTRA", "Engine", "EngineError", "add_engine_arguments", "ray_session"]
