"""contrastlab.report."""
