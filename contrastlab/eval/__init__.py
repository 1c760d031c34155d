"""contrastlab.eval."""

from contrastlab.eval.probe import (
    KNN_KS,
    LinearProbeResult,
    MeanCI,
    evaluate_encoder,
    evaluate_features,
    extract_features,
    knn_accuracy,
    knn_predict,
    knn_recall,
    linear_probe,
    mean_ci,
    random_encoder,
    raw_pixel_features,
    summarize_seeds,
)

__all__ = [
    "KNN_KS",
    "LinearProbeResult",
    "MeanCI",
    "evaluate_encoder",
    "evaluate_features",
    "extract_features",
    "knn_accuracy",
    "knn_predict",
    "knn_recall",
    "linear_probe",
    "mean_ci",
    "random_encoder",
    "raw_pixel_features",
    "summarize_seeds",
]
