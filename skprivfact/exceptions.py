"""Warnings and errors raised by skprivfact."""

__all__ = ["PrivacyLeakWarning", "PrivacyBudgetExceededError", "ReproducibleNoiseWarning"]


class PrivacyLeakWarning(UserWarning):
    """A quantity that should be fixed in advance was read from the private data.

    Raised when a bound the privacy guarantee rests on (a norm bound, the range
    of the inputs or targets) is left unset and derived from the data. The
    reported epsilon then does not cover that bound: the released model may
    reveal it. Set the bound explicitly to silence the warning and close the
    leak.

    Also raised by a central fit whose ``delta`` is not below ``1 /
    n_samples`` (where the number of records is public): (epsilon,
    delta)-DP then admits a mechanism that publishes one record in full with
    probability delta.
    """


class PrivacyBudgetExceededError(ValueError):
    """A release would spend more privacy than the estimator's budget allows.

    Raised before anything is released or charged, so the budget already
    spent is unchanged when this error is seen.
    """


class ReproducibleNoiseWarning(UserWarning):
    """A private fit ran with repeatable noise, so its release is not private.

    Issued by every fit inside :func:`skprivfact.privacy.reproducible_noise`,
    the testing mode in which batches and noise come from a seeded stream:
    anyone who knows the seed can remove the noise.
    """
