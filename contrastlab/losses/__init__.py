"""contrastlab.losses."""
