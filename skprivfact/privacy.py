"""The privacy engine of every central-DP estimator, and the budget that spans fits.

A central-DP fit is planned once (:class:`PrivacyPlan`: sampling rate, number
of releases, noise multiplier, accountant and neighbouring relation) and run
through one :class:`PrivacyEngine`, which owns what the guarantee rests on:

- the randomness of every release (batch selection and noise) is drawn from
  the operating system's entropy, a fresh stream per release, never from
  numpy's global state or from ``random_state``: a seed, a copy or a pickle
  of an estimator cannot replay it (a plan without noise, which claims no
  privacy, takes its batches from an integer ``random_state``);
- a release is one call that checks the budgets, draws the noise and records
  the accountant step, so that noise and step cannot be separated: a release
  without noise records an infinite epsilon;
- a step that would spend beyond the estimator's ``epsilon`` or beyond a shared
  :class:`PrivacyBudget` is refused before any noise is drawn.

Estimators supply only their per-record statistics, clipped to the
sensitivities they declare.

:func:`reproducible_noise` is the one way to make the noise repeatable, for
tests: inside it every release draws from a seeded stream, the fitted
estimators say so (``reproducible_noise_``) and a
:class:`~skprivfact.exceptions.ReproducibleNoiseWarning` is issued at each
fit.
"""

import contextlib
import dataclasses
import math
import numbers
import random
import threading
import warnings

import numpy as np

from .accounting import calibrate_noise_multiplier, make_accountant
from .exceptions import PrivacyBudgetExceededError, ReproducibleNoiseWarning
from .mechanisms import gaussian_mechanism, gaussian_noise_scales
from .utils._validation import check_privacy_params

__all__ = [
    "PrivacyBudget",
    "PrivacyPlan",
    "PrivacyEngine",
    "plan_privacy",
    "reproducible_noise",
]

_state = threading.local()


@contextlib.contextmanager
def reproducible_noise(seed):
    """Make the privacy noise and batches repeatable: for tests only.

    Inside the ``with`` block every release of every DP estimator draws its
    batch and its noise from a stream derived from ``seed`` and the
    estimator's integer ``random_state`` (or, without one, from the order of
    the fits), one child of a :class:`numpy.random.SeedSequence` per release,
    so that a script run twice gives the same fits and a fit repeated with the
    same ``random_state`` gives the same model. Anyone who knows the seed and the other
    records can then remove the noise: the released model is NOT private.
    Fitted estimators record the mode in ``reproducible_noise_`` and every fit
    inside the block warns with
    :class:`~skprivfact.exceptions.ReproducibleNoiseWarning`. Outside the
    block (the default) the randomness of releases comes from the operating
    system's entropy and ``random_state`` seeds only what is not released
    (initial values).

    Like diffprivlib's ``random_state`` and Opacus's ``secure_mode=False``,
    this trades the guarantee for repeatability; unlike them it is never the
    default and cannot be switched on by an estimator parameter, so a seed
    kept for reproducible initialisation never weakens a release.

    Parameters
    ----------
    seed : int
        The root seed.

    Yields
    ------
    None
        The block runs in the testing mode.

    Examples
    --------
    >>> import warnings
    >>> import numpy as np
    >>> from skprivfact import DPBayesLogReg
    >>> from skprivfact.privacy import reproducible_noise
    >>> X = np.random.RandomState(0).normal(size=(200, 2)) / 2
    >>> y = (X[:, 0] > 0).astype(int)
    >>> fits = []
    >>> for _ in range(2):
    ...     with reproducible_noise(0), warnings.catch_warnings():
    ...         warnings.simplefilter("ignore")
    ...         fits.append(DPBayesLogReg(data_norm=1.0).fit(X, y).coef_)
    >>> bool(np.array_equal(*fits))
    True
    """
    previous = getattr(_state, "root", None)
    _state.root = np.random.SeedSequence(seed)
    try:
        yield
    finally:
        _state.root = previous


def _noise_is_reproducible():
    """Whether releases are drawn inside :func:`reproducible_noise`."""
    return getattr(_state, "root", None) is not None


def _testing_stream(random_state):
    """The seed sequence of one fit in the testing mode, or None outside it."""
    root = getattr(_state, "root", None)
    if root is None:
        return None
    if isinstance(random_state, numbers.Integral):
        return np.random.SeedSequence([root.entropy, int(random_state)])
    return root.spawn(1)[0]


def _check_sample_rate(sample_rate):
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must lie in (0, 1]; got {sample_rate!r}.")
    return float(sample_rate)


class PrivacyBudget:
    """One privacy budget over a dataset, charged by every fit that reads it.

    Pass the same budget as ``budget=`` to every DP estimator fitted on the
    dataset. Each release of each fit is charged to it, and a fit whose plan
    would take the total beyond ``(epsilon, delta)`` is refused once its input
    is validated, before anything is released or charged
    (:class:`~skprivfact.exceptions.PrivacyBudgetExceededError`). The budget
    is shared, not copied, by :func:`sklearn.base.clone`,
    :func:`copy.deepcopy` and so by ``GridSearchCV``: the total over all the
    fits of a search, refit included, is in :attr:`spent`. Fits on subsets of
    the dataset (cross-validation folds) are charged in full, an upper bound.

    An estimator's ``privacy_spent_`` covers the releases of its current model
    only (since its last ``fit``, including later ``partial_fit`` calls);
    the budget covers everything charged to it.

    A budget is thread-safe (``n_jobs`` with the threading backend). A budget
    unpickled in another process (``n_jobs`` with a process backend) cannot be
    charged: its spending would be lost, so it raises instead.

    Parameters
    ----------
    epsilon : float
        The total epsilon allowed, positive (``float("inf")``: no limit, only
        a record).
    delta : float
        The delta of the total, in (0, 1). Every estimator charged must use a
        delta no larger (the total is computed at this delta).
    accountant : {"rdp", "pld"}, default="rdp"
        How the total is composed: Renyi DP, or privacy loss distributions
        (tight; needs dp-accounting).
    neighbouring_relation : {"substitution", "add_remove"}, default="substitution"
        The relation the total holds for. "substitution" (replacing one record;
        the number of records is public) covers every estimator; "add_remove"
        accepts only fits that do not depend on the number of records. A fit
        whose own ``privacy_spent_`` is for adding or removing one record
        (``neighbouring_relation_ == "add_remove"``, such as a full-batch
        :class:`~skprivfact.DPBayesLogReg`) costs a substitution budget more
        than its own epsilon, up to about twice: replacing a record is
        removing one and adding another.

    Attributes
    ----------
    charges : list of tuple
        ``(fit, noise_multiplier, sample_rate, steps)`` for each run of
        releases charged, in order; ``fit`` names the estimator class and the
        fit's number ("DPLDA #3").
    n_fits : int
        Number of fits whose plans were accepted (refused ones are not
        counted).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import GridSearchCV
    >>> from skprivfact import DPBayesLogReg
    >>> from skprivfact.privacy import PrivacyBudget
    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(600, 2)) / 2
    >>> y = (X[:, 0] + 0.3 * rng.normal(size=600) > 0).astype(int)
    >>> budget = PrivacyBudget(epsilon=10.0, delta=1e-5)
    >>> search = GridSearchCV(
    ...     DPBayesLogReg(data_norm=1.0, budget=budget),
    ...     {"epsilon": [0.5, 1.0]}, cv=2, error_score="raise",
    ... ).fit(X, y)
    >>> budget.n_fits  # 2 epsilons x 2 folds, and the refit
    5
    >>> budget.spent[0] <= 10.0
    True
    """

    def __init__(
        self, epsilon, delta, *, accountant="rdp", neighbouring_relation="substitution"
    ):
        if not (isinstance(epsilon, (int, float)) and epsilon > 0):
            raise ValueError(f"epsilon must be a positive number; got {epsilon!r}.")
        check_privacy_params(delta=delta)
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self.accountant = accountant
        self.neighbouring_relation = neighbouring_relation
        self._accountant = make_accountant(accountant, neighbouring_relation)
        self.charges = []
        self.n_fits = 0
        self._lock = threading.Lock()
        self._detached = False

    # Shared, never copied: clones of an estimator charge the same budget.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        # A pickled copy lives apart from the original: what it spends would
        # not reach it. It reports what was spent, but refuses new charges.
        self._detached = True

    @property
    def spent(self):
        """``(epsilon, delta)`` spent in total by everything charged."""
        return float(self._accountant.get_epsilon(self.delta)), self.delta

    @property
    def remaining(self):
        """Epsilon still available at ``delta``."""
        return max(0.0, self.epsilon - self.spent[0])

    def _check_compatible(self, plan):
        if self._detached:
            raise RuntimeError(
                "This PrivacyBudget was unpickled (for example in a worker "
                "process of n_jobs with a process backend): what it spends "
                "would not reach the original. Fit with n_jobs=1 or the "
                "threading backend."
            )
        if plan.secure and self.accountant != "rdp":
            raise ValueError(
                "A secure=True fit cannot charge a budget composed with "
                f'accountant={self.accountant!r}: the discrete Gaussian is covered by '
                'the RDP bound only. Use PrivacyBudget(..., accountant="rdp").'
            )
        if plan.delta > self.delta:
            raise ValueError(
                f"The estimator's delta={plan.delta!r} exceeds the budget's "
                f"delta={self.delta!r}."
            )
        if (
            self.neighbouring_relation == "add_remove"
            and plan.neighbouring_relation != "add_remove"
        ):
            raise ValueError(
                "This budget holds for adding or removing one record, but the "
                "fit depends on the number of records (its guarantee is for "
                "substitution); use a budget with "
                'neighbouring_relation="substitution".'
            )

    def _would_spend(self, noise_multiplier, sample_rate, steps):
        trial = self._accountant.copy()
        trial.compose(noise_multiplier, sample_rate, steps)
        return trial.get_epsilon(self.delta)

    def _reserve(self, plan, owner, n_releases):
        """Refuse a fit whose planned releases would exceed the budget."""
        with self._lock:
            self._check_compatible(plan)
            total = _with_plan(self._accountant, plan, n_releases).get_epsilon(
                self.delta
            )
            n_releases += plan.n_preliminary_releases
            if total > self.epsilon:
                raise PrivacyBudgetExceededError(
                    f"The {owner} fit planned for {n_releases} release(s) "
                    f"would take the shared budget to epsilon = {total:.4g}, beyond "
                    f"its epsilon = {self.epsilon!r} ({self.spent[0]:.4g} spent by "
                    f"{self.n_fits} fit(s) so far).{self._relation_note(plan)}"
                )
            self.n_fits += 1
            return self.n_fits

    def _refuse_next(self, plan, owner, sample_rate, noise_multiplier):
        """Raise if one more release would exceed the budget (lock held)."""
        self._check_compatible(plan)
        total = self._would_spend(noise_multiplier, sample_rate, 1)
        if total > self.epsilon:
            raise PrivacyBudgetExceededError(
                f"One more {owner} release would take the shared budget to "
                f"epsilon = {total:.4g}, beyond its epsilon = {self.epsilon!r}."
                f"{self._relation_note(plan)}"
            )

    def _relation_note(self, plan):
        """Why an add/remove fit costs this budget more than its own epsilon."""
        if plan.neighbouring_relation == self.neighbouring_relation:
            return ""
        return (
            f" The fit's own epsilon holds for adding or removing one record; this "
            f"budget counts replacing one ({self.neighbouring_relation}), for which "
            "the same releases cost more (up to about twice). A budget with "
            'neighbouring_relation="add_remove" charges such fits their own epsilon.'
        )

    def _charge(self, plan, owner, sample_rate, noise_multiplier):
        """Record one release; refuse it if it would exceed the budget."""
        with self._lock:
            self._refuse_next(plan, owner, sample_rate, noise_multiplier)
            self._accountant.compose(noise_multiplier, sample_rate, 1)
            if self.charges and self.charges[-1][:3] == (
                owner,
                noise_multiplier,
                sample_rate,
            ):
                last = self.charges.pop()
                self.charges.append(last[:3] + (last[3] + 1,))
            else:
                self.charges.append((owner, noise_multiplier, sample_rate, 1))

    def __repr__(self):
        epsilon, delta = self.spent
        return (
            f"PrivacyBudget(epsilon={self.epsilon!r}, delta={self.delta!r}, "
            f"spent={epsilon:.4g}, fits={self.n_fits})"
        )


@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
    """Everything a central-DP fit fixes before it releases anything.

    Parameters
    ----------
    epsilon, delta : float
        The fit's budget (``epsilon=inf``: no limit).
    noise_multiplier : float
        Noise std over the sensitivity of each release (0: no noise).
    sample_rate : float
        Poisson sampling rate of each release's batch.
    n_releases : int
        Releases planned (the noise is calibrated for this many).
    accountant : {"rdp", "pld"}
        The accountant.
    neighbouring_relation : {"add_remove", "substitution"}
        The relation the epsilon holds for.
    secure : bool
        Whether the noise is the floating-point-safe discrete Gaussian.
    n_preliminary_releases : int
        Releases over every record (sampling rate 1) planned besides the
        ``n_releases``, with their own multiplier (0: none).
    preliminary_noise_multiplier : float
        Noise std over the sensitivity of each preliminary release.
    """

    epsilon: float
    delta: float
    noise_multiplier: float
    sample_rate: float
    n_releases: int
    accountant: str
    neighbouring_relation: str
    secure: bool = False
    n_preliminary_releases: int = 0
    preliminary_noise_multiplier: float = 0.0


def _with_plan(accountant, plan, n_releases):
    """A copy of ``accountant`` with the plan's preliminary releases and
    ``n_releases`` of its others composed."""
    trial = accountant.copy()
    if plan.n_preliminary_releases:
        trial.compose(plan.preliminary_noise_multiplier, 1.0, plan.n_preliminary_releases)
    return trial.compose(plan.noise_multiplier, plan.sample_rate, n_releases)


def plan_privacy(
    epsilon,
    delta,
    *,
    sample_rate,
    n_releases,
    accountant="rdp",
    neighbouring_relation="substitution",
    noise_multiplier=None,
    secure=False,
    n_preliminary_releases=0,
    preliminary_share=0.5,
):
    """Plan a fit: calibrate the noise once for its releases.

    Parameters
    ----------
    epsilon : float
        Budget of the fit; ``float("inf")`` without ``noise_multiplier`` means
        no noise.
    delta : float
        Delta in (0, 1).
    sample_rate : float
        Poisson sampling rate in (0, 1].
    n_releases : int
        Number of releases the noise is calibrated for.
    accountant : {"rdp", "pld"}, default="rdp"
        The accountant of the fit.
    neighbouring_relation : {"add_remove", "substitution"}, default="substitution"
        The relation the epsilon holds for.
    noise_multiplier : float, default=None
        A given multiplier, used as is; None calibrates it from ``epsilon``.
    secure : bool, default=False
        Floating-point-safe noise (:func:`~skprivfact.mechanisms.discrete_gaussian`
        on a fine grid, from the operating system's cryptographic randomness).
        Its Renyi DP is bounded by the continuous Gaussian's without
        subsampling, so it needs full batches (``sample_rate=1``) and the RDP
        accountant.
    n_preliminary_releases : int, default=0
        Releases over every record made besides the ``n_releases`` (for
        example a first statistic that decides what the others release),
        with a multiplier of their own.
    preliminary_share : float, default=0.5
        The share, in (0, 1), of the budget the preliminary releases take:
        their multiplier is that of ``n_preliminary_releases`` full-batch
        releases spending the whole budget, over ``sqrt(preliminary_share)``
        (Gaussian releases compose by the sum of their ``1 / sigma**2``); the
        other releases are calibrated to what is left. With a given
        ``noise_multiplier`` every release uses it.

    Returns
    -------
    plan : PrivacyPlan
        The plan, with the calibrated noise multiplier.
    """
    sample_rate = _check_sample_rate(sample_rate)
    if secure and sample_rate < 1.0:
        raise ValueError(
            "secure=True needs full-batch releases (batch_size=None, or at least "
            "the number of records): the accountant's subsampling amplification is "
            "proven for the continuous Gaussian, not for the discrete one."
        )
    if secure and accountant != "rdp":
        raise ValueError(
            'secure=True needs accountant="rdp": the Renyi DP of the discrete '
            "Gaussian is bounded by the continuous one's, its privacy loss "
            "distribution is not the one dp-accounting composes."
        )
    n_preliminary_releases = int(n_preliminary_releases)
    if not 0 < preliminary_share < 1:
        raise ValueError(
            f"preliminary_share must lie in (0, 1); got {preliminary_share!r}."
        )
    if noise_multiplier is not None:
        sigma = preliminary_sigma = float(noise_multiplier)
    elif math.isinf(epsilon):
        sigma = preliminary_sigma = 0.0
    else:
        calibration = {
            "accountant": accountant,
            "neighbouring_relation": neighbouring_relation,
        }
        preceded_by = ()
        preliminary_sigma = 0.0
        if n_preliminary_releases:
            preliminary_sigma = calibrate_noise_multiplier(
                epsilon, delta, steps=n_preliminary_releases, **calibration
            ) / math.sqrt(preliminary_share)
            preceded_by = ((preliminary_sigma, 1.0, n_preliminary_releases),)
        sigma = calibrate_noise_multiplier(
            epsilon,
            delta,
            sample_rate=sample_rate,
            steps=int(n_releases),
            preceded_by=preceded_by,
            **calibration,
        )
    return PrivacyPlan(
        float(epsilon),
        float(delta),
        sigma,
        sample_rate,
        int(n_releases),
        accountant,
        neighbouring_relation,
        bool(secure),
        n_preliminary_releases,
        preliminary_sigma if n_preliminary_releases else 0.0,
    )


class PrivacyEngine:
    """Runs the releases of one fit under its plan.

    Parameters
    ----------
    plan : PrivacyPlan
        The plan of the fit.
    budget : PrivacyBudget, default=None
        A shared budget to charge as well; the plan is reserved against it at
        once (refused before anything is released).
    owner : str, default=""
        Name used in messages.
    random_state : int or None, default=None
        Keys the fit's stream inside :func:`reproducible_noise`; outside it,
        an integer seeds the batches of a plan without noise (which claims no
        privacy) and is otherwise unused.
    reserve : int, default=None
        Releases checked against the fit's ``epsilon`` and the budget before
        anything else happens: the whole plan when None (``fit``), 1 for a
        ``partial_fit`` that takes one step at a time.

    Attributes
    ----------
    accountant : RDPAccountant or PLDAccountant
        One step per release.
    n_releases : int
        Releases made.
    reproducible : bool
        Whether the releases draw from :func:`reproducible_noise`'s stream.
    """

    def __init__(
        self,
        plan,
        *,
        budget=None,
        owner="",
        random_state=None,
        reserve=None,
    ):
        self.plan = plan
        self.budget = budget
        self.owner = owner
        self.accountant = make_accountant(plan.accountant, plan.neighbouring_relation)
        self.n_releases = 0
        self._n_main = 0
        self._n_preliminary = 0
        reserve = plan.n_releases if reserve is None else int(reserve)
        # Releases checked against epsilon here; later ones are checked one by
        # one (a calibrated plan meets epsilon for all its releases, a given
        # noise multiplier only for those checked).
        self._verified = reserve
        if not math.isinf(plan.epsilon):
            # A calibrated plan meets its epsilon by construction; a given
            # noise multiplier may not.
            total = _with_plan(self.accountant, plan, reserve).get_epsilon(plan.delta)
            if total > plan.epsilon * (1 + 1e-12):
                raise PrivacyBudgetExceededError(
                    f"{owner}: {reserve + plan.n_preliminary_releases} release(s) "
                    "with noise_multiplier="
                    f"{plan.noise_multiplier!r} would spend epsilon = {total:.4g}, "
                    f"beyond the budget epsilon = {plan.epsilon!r}. Lower the "
                    "number of releases, raise the noise, or raise epsilon."
                )
        self._testing_stream = _testing_stream(random_state)
        self.reproducible = self._testing_stream is not None
        if (
            self._testing_stream is None
            and plan.noise_multiplier == 0
            and isinstance(random_state, numbers.Integral)
        ):
            # No noise, no privacy claimed (epsilon is infinite): the batches
            # follow random_state, as any scikit-learn estimator's would.
            self._testing_stream = np.random.SeedSequence(int(random_state))
        if self.reproducible:
            warnings.warn(
                f"{owner or 'This fit'} runs inside reproducible_noise(): its "
                "batches and noise can be replayed from the seed, so the "
                "released model is not private. Use this for tests only.",
                ReproducibleNoiseWarning,
                stacklevel=3,
            )
        self._charge_label = owner
        if budget is not None:
            self._charge_label = f"{owner} #{budget._reserve(plan, owner, reserve)}"

    def generator(self):
        """A fresh generator for the randomness of one release.

        Operating-system entropy; the testing stream inside
        :func:`reproducible_noise`; or, for a plan without noise (no privacy
        claimed), a stream seeded by an integer ``random_state``. Use it for anything a release draws
        (batches, noise, resampling of records): nothing of it is stored.

        Returns
        -------
        rng : numpy.random.Generator
            A generator that nothing else uses.
        """
        if self._testing_stream is None:
            # default_rng() seeds a new SeedSequence with 128 bits from the
            # operating system (the secrets module).
            return np.random.default_rng()
        return np.random.default_rng(self._testing_stream.spawn(1)[0])

    def _secure_generator(self):
        """The cryptographic source of secure releases (seeded in testing mode)."""
        if self._testing_stream is None:
            return None
        return random.Random(int(self._testing_stream.spawn(1)[0].generate_state(2)[0]))

    @property
    def spent(self):
        """``(epsilon, delta)`` spent by the releases made so far."""
        return float(self.accountant.get_epsilon(self.plan.delta)), self.plan.delta

    def sample(self, n_samples, sample_rate=None):
        """Draw the indices of a Poisson batch: each row kept at the sampling rate.

        Drawn from the release's secret randomness, so the batch cannot be
        replayed (which the subsampling amplification assumes).

        Parameters
        ----------
        n_samples : int
            Number of rows.
        sample_rate : float, default=None
            The rate; the plan's when None.

        Returns
        -------
        batch : ndarray of int
            Sorted row indices.
        """
        rate = self.plan.sample_rate if sample_rate is None else sample_rate
        if rate >= 1.0:
            return np.arange(n_samples)
        rng = self.generator()
        size = rng.binomial(n_samples, rate)
        # An O(batch) draw of a uniform subset of that size.
        return np.sort(rng.choice(n_samples, size=size, replace=False))

    def _noise_multiplier(self, preliminary):
        plan = self.plan
        if not preliminary:
            return plan.noise_multiplier
        if self._n_preliminary >= plan.n_preliminary_releases:
            raise ValueError(
                f"The plan has {plan.n_preliminary_releases} preliminary release(s); "
                "all are made."
            )
        return plan.preliminary_noise_multiplier

    def _check_step(self, sample_rate, preliminary=False):
        plan = self.plan
        sigma = self._noise_multiplier(preliminary)
        # Planned releases were verified together when the engine was made
        # (the preliminary ones are counted by _noise_multiplier).
        within_plan = preliminary or (
            self._n_main < self._verified and sample_rate == plan.sample_rate
        )
        if not math.isinf(plan.epsilon) and not within_plan:
            trial = self.accountant.copy().compose(sigma, sample_rate, 1)
            total = trial.get_epsilon(plan.delta)
            if total > plan.epsilon:
                raise PrivacyBudgetExceededError(
                    f"One more release would spend epsilon = {total:.4g} in total, "
                    f"beyond the budget epsilon = {plan.epsilon!r} "
                    f"({self.n_releases} release(s) have spent "
                    f"{self.spent[0]:.4g}). Stop training, or refit with a larger "
                    "budget."
                )

    def check_next(self, sample_rate=None):
        """Raise if the next release would exceed a budget; draw nothing.

        Parameters
        ----------
        sample_rate : float, default=None
            The rate of the next release; the plan's when None.
        """
        rate = self.plan.sample_rate if sample_rate is None else sample_rate
        self._check_step(rate)
        if self.budget is not None:
            with self.budget._lock:
                self.budget._refuse_next(
                    self.plan, self._charge_label, rate, self.plan.noise_multiplier
                )

    def release(
        self, blocks, sensitivities, *, symmetric=None, sample_rate=None, preliminary=False
    ):
        """Release clipped, summed statistics as one Gaussian mechanism.

        Checks the budgets (before drawing anything), draws the noise of every
        block from a fresh secret stream (:func:`~skprivfact.mechanisms.gaussian_mechanism`: block
        ``i`` gets std ``noise_multiplier * sqrt(k) * sensitivities[i]``) and
        records one accountant step at the sampling rate. Without noise
        (``noise_multiplier == 0``) the blocks are returned as they are and
        the step records an infinite epsilon.

        Parameters
        ----------
        blocks : list of ndarray
            The statistics, each a sum over the batch of per-record
            contributions of L2 (Frobenius) norm at most ``sensitivities[i]``.
        sensitivities : sequence of float
            The per-record bound of each block.
        symmetric : sequence of bool, default=None
            Which blocks are symmetric matrices (symmetric noise).
        sample_rate : float, default=None
            The batch's sampling rate; the plan's when None.
        preliminary : bool, default=False
            Whether this is one of the plan's preliminary releases: over every
            record (rate 1), with their multiplier.

        Returns
        -------
        noisy_blocks : list of ndarray
            The released statistics.
        """
        if preliminary:
            rate = 1.0
        elif sample_rate is None:
            rate = self.plan.sample_rate
        else:
            rate = _check_sample_rate(sample_rate)
        if self.plan.secure and rate < 1.0:
            raise ValueError(
                "secure=True needs full-batch releases; this release samples at "
                f"rate {rate!r} (was batch_size changed since the plan was made?)."
            )
        self._check_step(rate, preliminary)
        sigma = self._noise_multiplier(preliminary)
        if self.budget is not None:
            self.budget._charge(self.plan, self._charge_label, rate, sigma)
        if sigma > 0:
            secure = self.plan.secure
            noisy = gaussian_mechanism(
                list(blocks),
                sensitivities,
                sigma,
                symmetric=symmetric,
                random_state=self._secure_generator() if secure else self.generator(),
                secure=secure,
            )
        else:
            noisy = [np.array(block, dtype=np.float64) for block in blocks]
        self.accountant.compose(sigma, rate, 1)
        self.n_releases += 1
        if preliminary:
            self._n_preliminary += 1
        else:
            self._n_main += 1
        return noisy

    def noise_scales(self, sensitivities, preliminary=False):
        """Noise std of each block of one release (see :meth:`release`).

        Parameters
        ----------
        sensitivities : sequence of float
            The per-record bound of each block.
        preliminary : bool, default=False
            Of a preliminary release.

        Returns
        -------
        scales : ndarray of shape (n_blocks,)
            ``noise_multiplier * sqrt(n_blocks) * sensitivities``.
        """
        sigma = (
            self.plan.preliminary_noise_multiplier
            if preliminary
            else self.plan.noise_multiplier
        )
        return gaussian_noise_scales(sensitivities, sigma)
