"""contrastlab.theory."""

from contrastlab.theory.diversity import check_theorem_4_5 as check_theorem_4_5
