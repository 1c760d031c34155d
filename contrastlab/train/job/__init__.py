"""The ``contrastlab train CONFIG`` job: its config, the builders from config to data, the runner, its outputs.

``config`` the :class:`JobConfig` and its parts; one file per further block (``lora``, ``matryoshka``,
``select``, ``prompts``, ``tensorboard``, ``sources_config``); ``data_source`` what a builder returns;
``datasets`` the registry ``DATA_BUILDERS`` (synthetic worlds, images); ``feature_pairs`` stored feature pairs;
``text_dataset`` a pairs file or the code corpus; ``text_sources`` several text sources; ``loss_parameters``
learnable loss parameters; ``dev_metrics`` retrieval metrics on a dev set; ``runner`` :func:`run_job`;
``export`` and ``model_card`` the sentence-transformers folder and its card.
"""
