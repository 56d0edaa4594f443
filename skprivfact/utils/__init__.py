"""Validation helpers shared by every skprivfact estimator."""

from ._validation import (
    check_count_matrix,
    check_noisy_count_matrix,
    check_non_negative_number,
    check_positive_bound,
    check_privacy_params,
)

__all__ = [
    "check_count_matrix",
    "check_noisy_count_matrix",
    "check_non_negative_number",
    "check_positive_bound",
    "check_privacy_params",
]
