"""contrastlab.experiments."""
