"""contrastlab.train."""
