"""Base classes holding the privacy parameters and lifecycle every estimator shares.

Estimators merge these constraints with their own, as
``{**LocalPrivacyEstimator._parameter_constraints, ...}``, so that a privacy
parameter is checked the same way everywhere. Central-DP estimators plan and
run their releases through :class:`~skprivfact.privacy.PrivacyEngine` with the
helpers of :class:`CentralPrivacyEstimator`.
"""

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.validation import _check_feature_names_in, check_is_fitted

from .exceptions import PrivacyLeakWarning
from .privacy import PrivacyBudget, PrivacyEngine, _noise_is_reproducible, plan_privacy
from .utils._progress import Progress
from .utils._validation import check_no_fit_params

__all__ = ["LocalPrivacyEstimator", "CentralPrivacyEstimator", "NamedOutputMixin"]


class LocalPrivacyEstimator(BaseEstimator):
    """Base for estimators of the local model: two-sided geometric noise.

    Holds the constraints of ``epsilon`` (positive and finite) and of
    ``sensitivity`` (the integer L1 distance ``N`` of limited-precision local
    privacy).
    """

    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "sensitivity": [Interval(Integral, 1, None, closed="left")],
    }

    # The parameters that describe the fitted model's noise: transform, score
    # and partial_fit refuse other values set after fit.
    _noise_param_names: tuple = ("epsilon", "sensitivity")

    def _noise_params(self):
        return tuple(getattr(self, name) for name in self._noise_param_names)

    def _record_noise_params(self):
        """In ``fit``, once the input is valid: the parameters the model holds."""
        self._fitted_noise_params = self._noise_params()

    def _check_noise_params_unchanged(self):
        """Refuse noise parameters changed since ``fit`` (``set_params``)."""
        current = self._noise_params()
        if current != getattr(self, "_fitted_noise_params", current):
            *first, last = self._noise_param_names
            raise ValueError(
                f"{', '.join(first)} or {last} changed since fit: call fit again "
                "(the fitted model describes the noise of the old values)."
            )


class CentralPrivacyEstimator(BaseEstimator):
    """Base for estimators of the central model: (epsilon, delta)-DP releases.

    ``epsilon=float("inf")`` is the documented "no privacy" value: the same
    algorithm runs without noise, for comparison, and ``privacy_spent_``
    reports an infinite epsilon.

    Subclasses call :meth:`_start_privacy` once per fit (once the input is
    validated, before any release: it calibrates the noise and reserves the
    plan against ``budget``), release through ``self._engine``;
    ``privacy_spent_``, ``n_releases_`` and ``accountant_`` read the engine.
    A subclass whose algorithm does not use the number of records when it
    uses every record in every release sets ``_full_batch_is_n_free = True``:
    its guarantee is then for adding or removing one record; otherwise it is
    for replacing one record, the number of records being public.
    """

    _parameter_constraints: dict = {
        # Interval(..., closed="neither") excludes inf, the "no privacy" value.
        "epsilon": [Interval(Real, 0, None, closed="neither"), Options(Real, {float("inf")})],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "accountant": [StrOptions({"rdp", "pld"})],
        "budget": [PrivacyBudget, None],
        "secure": ["boolean"],
    }

    _full_batch_is_n_free = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # A private fit draws its noise and batches from the operating
        # system's entropy: two fits with the same random_state differ (unless
        # inside reproducible_noise, the testing mode).
        # (epsilon is read as fit would take it: tags are also asked of an
        # estimator whose parameters fit has not validated yet.)
        no_noise = (
            getattr(self, "noise_multiplier", None) is None
            and isinstance(self.epsilon, Real)
            and math.isinf(self.epsilon)
        )
        tags.non_deterministic = not no_noise and not _noise_is_reproducible()
        return tags

    @staticmethod
    def _sample_rate(batch_size, n_samples):
        """The one batch-size policy: ``None`` or at least n uses every record."""
        if batch_size is None or batch_size >= n_samples:
            return 1.0
        return batch_size / n_samples

    @staticmethod
    def _releases_per_pass(sample_rate):
        """``ceil(n_samples / batch_size)`` from ``sample_rate = batch_size / n_samples``.

        ``1 / sample_rate`` can round just above an integer (49.00000000000001
        for 1 / 49): rounded to 9 decimals first, it makes no spare release.
        """
        return max(1, math.ceil(round(1.0 / sample_rate, 9)))

    def _start_privacy(
        self,
        n_samples,
        batch_size,
        *,
        noise_multiplier=None,
        reserve=None,
        n_passes=None,
        n_preliminary_releases=0,
        preliminary_share=0.5,
    ):
        """Plan the fit (``n_passes`` passes, ``max_iter`` when None), start its engine.

        ``n_preliminary_releases`` full-batch releases, taking
        ``preliminary_share`` of the budget, are planned besides (see
        :func:`~skprivfact.privacy.plan_privacy`).

        Returns the engine. Raises before anything is released, and before
        any attribute changes, if the plan (or its first ``reserve`` releases)
        would exceed ``epsilon`` or ``budget``. Once the plan is accepted, the
        model of an earlier fit is discarded: from here on the fitted
        attributes and ``privacy_spent_`` describe the new model only, even if
        the fit is interrupted.
        """
        sample_rate = self._sample_rate(batch_size, n_samples)
        if n_passes is None:
            n_passes = self.max_iter
        n_releases = n_passes * self._releases_per_pass(sample_rate)
        # Only batch_size=None is free of n: batch_size >= n would be full
        # batch for n records and subsampled for n + 1.
        n_free = batch_size is None and self._full_batch_is_n_free
        relation = "add_remove" if n_free else "substitution"
        if relation == "substitution" and self._is_private and self.delta * n_samples > 1:
            # The number of records is public under substitution, so this
            # warning tells nothing more.
            warnings.warn(
                f"delta={self.delta:g} is not below 1 / n_samples = "
                f"{1.0 / n_samples:.3g}: (epsilon, delta)-DP then admits a "
                "mechanism that publishes one record in full with probability "
                "delta. Choose delta well below 1 / n_samples.",
                PrivacyLeakWarning,
            )
        plan = plan_privacy(
            self.epsilon,
            self.delta,
            sample_rate=sample_rate,
            n_releases=n_releases,
            accountant=self.accountant,
            neighbouring_relation=relation,
            noise_multiplier=noise_multiplier,
            secure=self.secure,
            n_preliminary_releases=n_preliminary_releases,
            preliminary_share=preliminary_share,
        )
        engine = PrivacyEngine(
            plan,
            budget=self.budget,
            owner=type(self).__name__,
            random_state=getattr(self, "random_state", None),
            reserve=reserve,
        )
        for name in [
            name
            for name in vars(self)
            if name.endswith("_")
            and not name.startswith("_")
            and name not in ("n_features_in_", "feature_names_in_")
        ]:
            delattr(self, name)
        self._engine = engine
        self.sample_rate_ = plan.sample_rate
        self.noise_multiplier_ = plan.noise_multiplier
        self.neighbouring_relation_ = plan.neighbouring_relation
        self.reproducible_noise_ = engine.reproducible
        return engine

    @property
    def _is_private(self):
        """Whether fits add noise: anything computed from the records without
        it (a training objective, say) must then stay out of output."""
        noise_multiplier = getattr(self, "noise_multiplier", None)
        return noise_multiplier is not None or not math.isinf(self.epsilon)

    @property
    def privacy_spent_(self):
        """``(epsilon, delta)`` spent by the releases of the current model.

        Read from the accountant at every access, so it is up to date after
        each release, also while a fit runs and after one is interrupted.
        """
        engine = self.__dict__.get("_engine")
        if engine is None:
            raise AttributeError(
                f"{type(self).__name__} has no privacy_spent_: it is not fitted."
            )
        return engine.spent

    @property
    def n_releases_(self):
        """Number of releases of the current model."""
        engine = self.__dict__.get("_engine")
        if engine is None:
            raise AttributeError(f"{type(self).__name__} has no n_releases_.")
        return engine.n_releases

    @property
    def accountant_(self):
        """The accountant of the current model, one step per release."""
        engine = self.__dict__.get("_engine")
        if engine is None:
            raise AttributeError(f"{type(self).__name__} has no accountant_.")
        return engine.accountant

    def _check_plan_unchanged(self, noise_multiplier=None):
        """For ``partial_fit``: the parameters the plan was made with still hold.

        Changing ``epsilon``, ``delta``, ``accountant``, ``noise_multiplier``,
        ``secure`` or ``budget`` between calls would release under a plan made
        for other values (for example noise-free statistics accounted as
        noisy, or releases a new budget never sees): refuse. So is a changed
        ``n_components``, which the fitted model does not have, before a
        release is spent on a step that cannot be taken.
        """
        engine = self._engine
        plan = engine.plan
        if noise_multiplier is not None:
            expected_sigma = float(noise_multiplier)
        elif math.isinf(self.epsilon):
            expected_sigma = 0.0
        else:
            expected_sigma = None  # calibrated: must still be noisy
        changed = (
            float(self.epsilon) != plan.epsilon
            or float(self.delta) != plan.delta
            or self.accountant != plan.accountant
            or bool(self.secure) != plan.secure
            or self.budget is not engine.budget
            or (expected_sigma is not None and expected_sigma != plan.noise_multiplier)
            or (expected_sigma is None and plan.noise_multiplier == 0.0)
        )
        if changed:
            raise ValueError(
                "epsilon, delta, accountant, noise_multiplier, secure or budget "
                "changed since the first partial_fit: the noise was planned for the "
                "old values. Call fit to start a new model."
            )
        fitted_components = getattr(self, "components_", None)
        if (
            fitted_components is not None
            and fitted_components.shape[0] != self.n_components
        ):
            # Checked before the release: the model's shape is the fitted one.
            raise ValueError(
                f"n_components changed since the first partial_fit (the model has "
                f"{fitted_components.shape[0]}, n_components is {self.n_components}). "
                "Call fit to start a new model."
            )

    def _refuse_fit_params(self, fit_params):
        """``fit(**fit_params)``: refuse ``sample_weight``, saying why."""
        check_no_fit_params(
            self,
            fit_params,
            "a weight scales a record's contribution, and the noise is calibrated "
            "to contributions of at most the declared bound: weights above 1 would "
            "exceed it. Repeat a record to weight it (which multiplies its privacy "
            "loss) or drop records to down-weight them.",
        )

    def _make_progress(self, total, unit="pass", **kwargs):
        """The fit's progress (the one format of every estimator), of ``total`` passes."""
        budget = None if math.isinf(self.epsilon) else float(self.epsilon)
        return Progress(
            total,
            verbose=self.verbose,
            desc=type(self).__name__,
            epsilon_budget=budget,
            unit=unit,
            **kwargs,
        )

    def _show_partial_fit_release(self):
        """With ``verbose``, ``partial_fit``'s line in the one format: the
        release just made, of those planned, and the epsilon spent."""
        if not self.verbose:
            return
        engine = self._engine
        plan = engine.plan
        # engine.n_releases counts the preliminary releases too.
        progress = self._make_progress(
            plan.n_releases + plan.n_preliminary_releases, unit="release"
        )
        print(
            progress.line(
                engine.n_releases,
                epsilon_spent=engine.spent[0],
                step="partial_fit",
                timing=False,
            ),
            flush=True,
        )


class NamedOutputMixin:
    """``get_feature_names_out`` for a transform whose columns have fixed names.

    The class sets ``_output_names``, the names of :meth:`transform`'s columns.
    """

    _output_names: tuple = ()

    def get_feature_names_out(self, input_features=None):
        """Get the names of the columns of :meth:`transform`.

        Parameters
        ----------
        input_features : array-like of str or None, default=None
            Checked against the input features seen in :meth:`fit`; unused.

        Returns
        -------
        feature_names_out : ndarray of str objects
            The names, in the order of the columns.
        """
        check_is_fitted(self)
        _check_feature_names_in(self, input_features)
        return np.asarray(self._output_names, dtype=object)
