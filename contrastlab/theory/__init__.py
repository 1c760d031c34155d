"""contrastlab.theory: Whiteley's similarity-search theory as computable, checkable quantities."""

from contrastlab.theory.atoms_example import AtomsExample, orthogonal_atoms_example
from contrastlab.theory.bounds import (
    b_tau,
    concentration_term,
    continuity_bound,
    continuity_check,
    dcl_population_bounds,
    dcl_search_bound,
    lemma1_lipschitz,
    lemma4_bound,
    prop1_bounds,
    prop2_bound,
    rademacher_bound,
    theorem1_terms,
)
from contrastlab.theory.diversity import check_theorem_4_5
from contrastlab.theory.risk import MCEstimate, embed, empirical_risk, infonce_risk, tuple_loss
from contrastlab.theory.search_ce import (
    empirical_model_kernel,
    empirical_search_ce,
    ground_truth_population_ce,
    idealised_search,
    k_gap_estimates,
    model_kernel_log_density,
    population_ce,
    search_cross_entropy,
)

__all__ = [
    "AtomsExample",
    "MCEstimate",
    "b_tau",
    "check_theorem_4_5",
    "concentration_term",
    "continuity_bound",
    "continuity_check",
    "dcl_population_bounds",
    "dcl_search_bound",
    "embed",
    "empirical_model_kernel",
    "empirical_risk",
    "empirical_search_ce",
    "ground_truth_population_ce",
    "idealised_search",
    "infonce_risk",
    "k_gap_estimates",
    "lemma1_lipschitz",
    "lemma4_bound",
    "model_kernel_log_density",
    "orthogonal_atoms_example",
    "population_ce",
    "prop1_bounds",
    "prop2_bound",
    "rademacher_bound",
    "search_cross_entropy",
    "theorem1_terms",
    "tuple_loss",
]
