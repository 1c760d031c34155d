"""The training loop: :func:`~contrastlab.train.loop.trainer.fit` and what it steps through.

``trainer`` the loop (:func:`fit`); ``config`` its configs (``TrainConfig``, ``OptimConfig``); ``schedule`` the
learning rate; ``checkpoint`` sealed checkpoints; ``objective`` what a step minimises; ``grad_cache`` gradient
caching; ``queue`` a queue of past embeddings (MoCo); ``heap`` giving freed CPU memory back after a step.
"""
