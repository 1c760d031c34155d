"""contrastlab.eval."""
