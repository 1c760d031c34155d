"""Bridges to other libraries' training loops (sentence-transformers); each imports its library lazily."""
