"""contrastlab.theory."""
