"""The smoke settings of the MiniLM fine-tuning experiments (``text-finetune``, ``matryoshka-finetune``)."""

TINY_FINETUNE = {
    "seeds": (0,),
    "steps": 1,
    "batch_size": 4,
    "max_seq_length": 12,
    "max_queries": 5,
    "max_documents": 30,
    "n_boot": 50,
    "workers": 1,
}
"""One seed, one step of 4 pairs, 5 queries against 30 signatures, in this process."""
