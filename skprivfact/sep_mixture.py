"""Differentially private stochastic expectation propagation for Gaussian mixtures."""

import math
from numbers import Integral, Real

import numpy as np
from scipy.special import logsumexp
from sklearn.base import (
    ClassNamePrefixFeaturesOutMixin,
    DensityMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._mixture_kernels import mixture_sites
from .base import CentralPrivacyEstimator
from .sep import (
    _AUTO_PRIVATE_DAMPING_PASSES,
    _apply_scaling,
    _denoise_weights,
    _fit_sep,
    _scaling,
)
from .utils._validation import validate_input

__all__ = ["DPSEPGaussianMixture"]

# Initial factor: each component's mean drawn uniformly in this fraction of
# the scaled box around its centre (not around the prior mean: a prior mean
# near a corner would start every component at that corner, clipped to the
# box, where they stay together), held by this many records' worth of
# evidence (data-independent symmetry breaking). On the paper's synthetic
# setting (N = 1000, 4 components in 4 dimensions, 4 datasets x 3 seeds) a
# spread of 1 left no run in a poor local optimum without noise, against 4
# of 12 at 0.5; one record's worth against four took the runs in a poor
# optimum (F-norm against the true means above 1) from 3 of 12 to 0 without
# noise, with the same private F-norms.
_INIT_SPREAD = 1.0
_INIT_STRENGTH = 1.0
# batch_size="auto": this many updates per pass.
_AUTO_UPDATES_PER_PASS = 10
# The smallest component variance, relative to the squared scale of the
# data, that the fit takes: components narrower than 1e-8 of the data's scale
# are points (below about 1e-22 the moment matching divides by zero).
_MIN_SCALED_VARIANCE = 1e-16


class _MixtureModel:
    """Isotropic Gaussian mixture with known variance and weights, SEP sites.

    The posterior over the ``K`` component means is a product of isotropic
    Gaussians ``N(m_k, v_k I)``; its natural parameters, stacked in one vector
    of length ``K * (d + 1)``, are per component the precision ``1 / v_k``
    then the precision times the mean ``m_k / v_k`` (scaled units).

    The released coordinates are these natural parameters times the
    component variance ``s2`` (``release_weights``): in those units a record
    that belongs to component ``k`` for sure has the site ``(1, x)`` (one
    observation's count and sum), so ``clip_norm`` reads as a number of
    records' worth of evidence whatever the scale of ``s2``.
    """

    def __init__(self, n_components, n_features, variance, log_weights, prior_mean,
                 prior_precision, n_samples, init_spread, init_strength):
        self.n_samples = n_samples
        self.init_spread = init_spread
        self.init_strength = init_strength
        self.n_components = n_components
        self.n_features = n_features
        self.variance = float(variance)
        self.log_weights = np.asarray(log_weights, dtype=np.float64)
        self.prior_mean = np.asarray(prior_mean, dtype=np.float64)
        self.prior_precision = float(prior_precision)
        self.size = n_components * (n_features + 1)

    def split(self, theta):
        """``(precision (K,), shift (K, d))`` of a natural-parameter vector."""
        table = theta.reshape(self.n_components, self.n_features + 1)
        return table[:, 0], table[:, 1:]

    def moments(self, theta, noise_std=0.0):
        """Means ``(K, d)`` and variances ``(K,)`` of a natural-parameter vector.

        ``noise_std`` is the std of the privacy noise in each released
        coordinate of ``theta`` (weighted units): each mean is then shrunk
        towards the prior mean by its empirical-Bayes factor given the noise
        it carries (as :class:`~skprivfact.DPSEPRegressor` shrinks its weights), which pins a
        component that holds few records near the prior instead of letting
        the noise throw it about the box. Post-processing.
        """
        precision, shift = self.split(theta)
        variance = 1.0 / precision
        means = shift * variance[:, None]
        if noise_std > 0:
            mean_noise = (noise_std / self.variance) * variance
            centred, variance_d = _denoise_weights(
                means - self.prior_mean,
                np.repeat(variance[:, None], self.n_features, axis=1),
                np.repeat(mean_noise[:, None], self.n_features, axis=1),
                self.prior_precision,
            )
            means = self.prior_mean + centred
            variance = variance_d.mean(axis=1)
        return means, variance

    def prior(self):
        theta = np.empty((self.n_components, self.n_features + 1))
        theta[:, 0] = self.prior_precision
        theta[:, 1:] = self.prior_precision * self.prior_mean
        return theta.ravel()

    def initial_factor(self, random_state, n_samples):
        # Data-independent symmetry breaking: the initial means are drawn
        # uniformly in the scaled box [-1, 1]^d (the public bounds) from
        # random_state, each held by one record's worth of precision, so that
        # the first sites are computed at a broad cavity.
        means = self.init_spread * random_state.uniform(
            -1.0, 1.0, size=(self.n_components, self.n_features)
        )
        table = np.empty((self.n_components, self.n_features + 1))
        table[:, 0] = self.init_strength / (n_samples * self.variance)
        table[:, 1:] = table[:, :1] * means
        return table.ravel()

    def release_weights(self, cavity):
        return np.full(self.size, self.variance)

    def sites(self, X, y, cavity, noise_std=0.0):
        """Each row's moment-matched site, all components stacked in one row.

        At the cavity ``N(m_k, v_k I)`` the tilted distribution of ``mu_k``
        is ``r_k N(m_k', v_k' I) + (1 - r_k) N(m_k, v_k I)``, with ``r_k`` the
        responsibility under the predictive ``N(x; m_k, (s2 + v_k) I)``,
        ``v_k' = v_k s2 / (v_k + s2)`` and ``m_k' = m_k + v_k (x - m_k) / (v_k
        + s2)``. Its isotropic moment match has mean ``M_k = m_k + r_k (m_k'
        - m_k)`` and variance ``V_k = r_k v_k' + (1 - r_k) v_k + r_k (1 - r_k)
        |m_k' - m_k|**2 / d``; the site is ``(1 / V_k - 1 / v_k, M_k / V_k -
        m_k / v_k)``.
        """
        means, variance = self.moments(cavity, noise_std)
        return mixture_sites(
            np.ascontiguousarray(X),
            np.ascontiguousarray(means),
            variance,
            self.log_weights,
            self.variance,
        )

    def project(self, factor, previous):
        """Nearest sensible factor: posterior precision at least the prior's, mean in the box.

        The privacy noise (or, early on, the negative sites of records that
        two components share) can leave a component's factor precision
        negative, and the posterior mean ``(prior shift + n f shift) /
        (prior precision + n f precision)`` far outside the data's box. The
        factor precision is floored at 0 (the posterior precision at the
        prior's), the posterior mean computed with the floored precision is
        clipped to the box [-1, 1]^d, and the factor's shift set to give that
        mean. Post-processing of released values; no update is rejected.
        """
        table = factor.reshape(self.n_components, self.n_features + 1)
        n = self.n_samples
        precision = np.maximum(table[:, 0], 0.0)
        posterior_precision = self.prior_precision + n * precision
        posterior_shift = self.prior_precision * self.prior_mean + n * table[:, 1:]
        mean = np.clip(posterior_shift / posterior_precision[:, None], -1.0, 1.0)
        out = np.empty_like(table)
        out[:, 0] = precision
        out[:, 1:] = (
            posterior_precision[:, None] * mean - self.prior_precision * self.prior_mean
        ) / n
        return out.ravel()


def _check_weights(weights, n_components):
    if weights is None:
        return np.full(n_components, 1.0 / n_components)
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (n_components,):
        raise ValueError(
            f"weights must have shape ({n_components},); got {weights.shape}."
        )
    if np.any(~np.isfinite(weights)) or np.any(weights <= 0):
        raise ValueError("weights must be positive and finite.")
    if not math.isclose(weights.sum(), 1.0, rel_tol=1e-6):
        raise ValueError(f"weights must sum to 1; got {float(weights.sum())!r}.")
    return weights


def _check_mean_prior(mean_prior, n_features):
    """``mean_prior`` as a finite array of shape (n_features,), or None."""
    if mean_prior is None:
        return None
    values = np.asarray(mean_prior, dtype=np.float64)
    if values.ndim == 0:
        values = np.full(n_features, float(values))
    if values.shape != (n_features,):
        raise ValueError(
            f"mean_prior must be a number or have one entry per feature "
            f"({n_features}); got shape {values.shape}."
        )
    if not np.all(np.isfinite(values)):
        raise ValueError("mean_prior must be finite.")
    return values


class DPSEPGaussianMixture(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, DensityMixin, CentralPrivacyEstimator
):
    """Gaussian mixture by differentially private stochastic expectation propagation.

    The model of Li, Hernandez-Lobato and Turner's (2015) and Vinaroz and
    Park's (2022) mixture experiments: ``n_components`` isotropic Gaussian
    components ``N(mu_k, covariance * I)`` with a known (public) variance
    ``covariance`` and known mixing ``weights``; each component mean has the
    prior ``N(mean_prior, I / mean_precision_prior)``, and the posterior over
    the means is approximated by a product of isotropic Gaussians
    ``N(means_[k], means_variance_[k] I)``. Stochastic expectation
    propagation (SEP) keeps one global factor per component, standing for a
    record's average likelihood; the posterior is ``prior * f**n_samples``.

    Privacy: (epsilon, delta)-differential privacy for replacing one record
    (substitution: the number of records ``n_samples``, which sets the cavity
    ``prior * f**(n_samples - 1)`` and the scale of the update, is public).
    Each update draws a Poisson-subsampled batch (rate ``q = batch_size /
    n_samples``; every record with ``batch_size=None``), computes each
    record's sites for all components at the cavity, stacks them into one
    vector of length ``n_components * (n_features + 1)``, clips that vector
    to Euclidean norm ``clip_norm`` (so that one record's contribution is
    bounded over all components together) and releases the sum of the
    clipped vectors with Gaussian noise of standard deviation
    ``noise_multiplier_ * clip_norm`` on every coordinate: ONE release per
    update, one accountant step. The contributions are the sites alone,
    centred at zero, so adding or removing a record moves the release by at
    most ``clip_norm`` and replacing one by ``2 * clip_norm``. The norm, the
    clip and the noise are taken in the natural parameters times the public
    component variance (see Notes). Then ``f <- (1 - damping q) f + (damping
    / n_samples) * released sum``; each component's factor precision is
    floored at zero and its posterior mean clipped to the bounds, the factor
    is clipped to norm ``clip_norm``, and the cavity's noisy means are
    shrunk towards the prior mean given the known scale of their noise (see
    Notes): post-processing of released values. The control flow of an
    update never depends on the data (no rejection of records, components
    or updates). The noise multiplier is calibrated once so that all
    ``max_iter`` passes (``max_iter * ceil(1 / q)`` updates) spend at most
    ``(epsilon, delta)``. Batches and noise come from the operating system's
    entropy (:class:`~skprivfact.privacy.PrivacyEngine`); in a private fit
    ``random_state`` seeds only the initial means, drawn uniformly inside
    ``bounds_X`` independently of the data (and :meth:`sample`'s draws from
    the released posterior). A :class:`~skprivfact.privacy.PrivacyBudget`
    passed as ``budget`` is charged by every release. Records are clipped to
    ``bounds_X`` and mapped to [-1, 1]. Not covered: ``bounds_X=None``, which
    standardizes with the data's own mean and standard deviation (a
    :class:`~skprivfact.exceptions.PrivacyLeakWarning` is issued and the
    fitted ``X_offset_`` and ``X_scale_`` reveal them); training records
    outside the bounds are clipped without a warning. ``covariance``,
    ``weights`` and the prior are public parameters, never fitted.
    ``epsilon=float("inf")`` runs SEP without noise (clipped, or unclipped
    with ``clip_norm=None``).

    Parameters
    ----------
    n_components : int, default=1
        Number of mixture components.
    epsilon : float, default=1.0
        Privacy budget of the whole fit, positive; ``float("inf")`` for no
        noise.
    delta : float, default=1e-5
        Privacy parameter delta in (0, 1); choose it well below ``1 /
        n_samples`` (a fit whose ``delta`` exceeds it warns with
        :class:`~skprivfact.exceptions.PrivacyLeakWarning`).
    clip_norm : float or None, default=1.0
        Bound ``C`` on the Euclidean norm of each record's stacked sites, in
        units of one observation's evidence (a record that surely belongs to
        a component has the site ``(1, x)`` there, of norm at most ``sqrt(1 +
        n_features)`` in the scaled box). None disables clipping, allowed
        only with ``epsilon=float("inf")``.
    damping : float or "auto", default="auto"
        SEP damping ``gamma`` in (0, 1]: each record in a batch replaces
        ``gamma / n_samples`` of the factor. "auto" is ``min(1, 4 /
        max_iter)`` under noise (the start's weight in the factor falls to
        2% and the factor averages the noise of about ``max_iter / 4``
        passes' releases) and 0.5 without noise.
    batch_size : int, "auto" or None, default="auto"
        Expected batch size (Poisson sampling); None (or at least
        ``n_samples``) uses every record in every update. "auto" is
        ``n_samples // 10`` (at least 1): ten updates per pass. Many small
        updates let merged components split where full-batch updates from the
        same start stall in a local optimum (``benchmarks/bench_sep_mixture.py``
        measures both).
    max_iter : int, default=40
        Number of passes; a pass is ``ceil(n_samples / batch_size)``
        updates. The noise is calibrated for this many.
    averaging_fraction : float, default=0.5
        Fraction in (0, 1] of the last updates whose released factors are
        averaged into the returned posterior.
    bounds_X : pair (lower, upper) or None, default=None
        Public bounds of the data, scalars or arrays of length ``n_features``;
        records are clipped to them (with a warning without privacy: a private
        fit does not release whether a record lies outside) for fitting and
        mapped to [-1, 1] by one common scale (the largest half-range), which
        keeps the components isotropic. None standardizes with the training
        data's mean and standard deviation (a leak when ``epsilon`` is finite).
    covariance : float, default=1.0
        The known variance of every coordinate of every component, in the
        units of ``X`` (the components are ``N(mu_k, covariance * I)``).
    weights : array-like of shape (n_components,) or None, default=None
        The known mixing weights; None is uniform.
    mean_prior : float, array-like of shape (n_features,) or None, default=None
        Mean of the Gaussian prior of each component mean, in the units of
        ``X``, within ``bounds_X``; None is the centre of ``bounds_X``.
    mean_precision_prior : float or None, default=None
        Precision of that prior (per coordinate), in the units of ``X``;
        None is ``1 / half_range**2`` (unit precision in the scaled units).
    accountant : {"rdp", "pld"}, default="rdp"
        The privacy accountant.
    budget : PrivacyBudget, default=None
        A budget shared across fits, copies and a whole ``GridSearchCV``.
    secure : bool, default=False
        Floating-point-safe noise (exact discrete Gaussian on a fine grid,
        from the operating system's cryptographic randomness); needs full
        batches and ``accountant="rdp"``.
    verbose : int or "bar", default=0
        Progress in the format of every skprivfact estimator: 1 prints about
        ten lines, 2 one per pass (the epsilon spent so far, elapsed time and
        time left); "bar" draws a tqdm bar (the ``progress`` extra).
    random_state : int, RandomState instance or None, default=None
        Seeds the initial means (not a release), and the batches of a fit
        without noise (``epsilon=inf``, no privacy); a private fit's batches
        and noise never come from it.

    Attributes
    ----------
    means_ : ndarray of shape (n_components, n_features)
        Posterior means of the component means, in the units of ``X``.
    means_variance_ : ndarray of shape (n_components,)
        Posterior variance of every coordinate of each component mean.
    means_covariance_ : ndarray of shape (n_components, n_features, n_features)
        Posterior covariance of each component mean (``means_variance_[k] *
        I``).
    covariances_ : ndarray of shape (n_components,)
        The components' (known) variance, as scikit-learn's spherical
        ``covariances_``.
    weights_ : ndarray of shape (n_components,)
        The (known) mixing weights.
    X_offset_ : ndarray of shape (n_features,)
        Offset of the map ``(X - X_offset_) / X_scale_`` to the scaled data.
    X_scale_ : float
        Scale of that map.
    noise_multiplier_ : float
        Noise std of each release relative to its sensitivity.
    damping_ : float
        The damping used.
    sample_rate_ : float
        Poisson sampling rate of the batches.
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` spent (``(inf, delta)`` without noise).
    neighbouring_relation_ : str
        The relation ``privacy_spent_`` holds for ("substitution").
    accountant_ : RDPAccountant or PLDAccountant
        The accountant, one step per update.
    reproducible_noise_ : bool
        Whether the fit ran inside
        :func:`~skprivfact.privacy.reproducible_noise` (not private).
    n_iter_ : int
        Number of passes run.
    n_releases_ : int
        Number of updates (releases) run.
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`, when ``X`` has string
        column names.

    See Also
    --------
    sklearn.mixture.GaussianMixture : Non-private maximum-likelihood mixture (EM).
    skprivfact.DPSEPRegressor : DP-SEP for regression.

    Notes
    -----
    Scaled units: ``z = (x - X_offset_) / X_scale_`` with one scale for all
    features, so ``s2 = covariance / X_scale_**2``. At the cavity ``N(m_k,
    v_k I)`` (natural parameters ``prior + (n - 1) f``) a record ``z`` has
    responsibilities ``r_k`` proportional to ``pi_k N(z; m_k, (s2 + v_k)
    I)``; with the gain ``g_k = v_k / (v_k + s2)``, the moment-matched
    tilted marginal of ``mu_k`` has mean ``M_k = m_k + r_k g_k (z - m_k)``
    and variance ``V_k = v_k - r_k g_k v_k + r_k (1 - r_k) g_k**2 |z -
    m_k|**2 / d`` (the isotropic family matches the mean and
    ``E|mu_k|**2``). The site is the change of natural parameters, ``(1 /
    V_k - 1 / v_k, M_k / V_k - m_k / v_k)``, for every ``k``; the released
    vector is ``s2`` times the sites of all components, whose norm is
    clipped to ``clip_norm``. A record that certainly belongs to ``k`` has
    the site ``(1 / s2, z / s2)`` (its likelihood), ``(1, z)`` once
    weighted: ``clip_norm`` compares with the expected sufficient statistics
    ``(r_k, r_k z)`` that DP-EM releases. Clipping scales a record's whole
    site, which tempers its likelihood but keeps its mean ``M_k``.

    Start: the factor puts each component's mean at a point drawn uniformly
    in the scaled box from ``random_state``, with one record's worth of
    precision (``1 / (n s2)`` per component), so the first sites are
    computed at a broad cavity and every component takes a share of the
    records before the cavity sharpens.

    Projection (after each update, on released values): the factor precision
    ``f_k`` is floored at 0 (the posterior precision ``p0 + n f_k`` at the
    prior's ``p0``), the posterior mean ``(p0 m0 + n f_shift_k) / (p0 + n
    f_k)`` is clipped to [-1, 1]^d and the factor's shift reset to give it.
    A negative ``f_k`` is a legitimate EP state (records shared by two
    components have negative-precision sites), and under noise a common one
    while a component holds few records; rejecting such updates, as the
    authors' code does, would make the control flow depend on the data.

    Shrinkage (post-processing): a cavity or posterior mean computed from
    released values carries noise of known std ``tau_k = (noise std of a
    natural coordinate) * v_k``; with the prior spread ``1 / p0 - v_k`` of
    the means about ``m0``, the mean used is ``m0 + (m_k - m0) * spread /
    (spread + tau_k**2)`` and its variance grows by ``spread * tau_k**2 /
    (spread + tau_k**2)`` (the shrinkage of
    :class:`~skprivfact.DPSEPRegressor`'s weights). A
    component holding few records is thus held near the prior instead of
    being thrown about the box by the noise; one holding many is unchanged.

    ``predict_proba``, ``score_samples`` and ``transform`` use the posterior
    predictive ``sum_k pi_k N(x; means_[k], (covariance +
    means_variance_[k]) I)``, which integrates the uncertainty of the means
    (scikit-learn's GaussianMixture plugs in point estimates).

    References
    ----------
    M. Vinaroz and M. Park, "Differentially private stochastic expectation
    propagation", Transactions on Machine Learning Research, 2022.
    Y. Li, J. M. Hernandez-Lobato and R. E. Turner, "Stochastic expectation
    propagation", NeurIPS 2015.
    M. Park, J. Foulds, K. Chaudhuri and M. Welling, "DP-EM: Differentially
    private expectation maximization", AISTATS 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact import DPSEPGaussianMixture
    >>> rng = np.random.RandomState(0)
    >>> centres = np.array([[-2.0, -2.0], [2.0, 2.0]])
    >>> X = centres[rng.randint(2, size=5000)] + 0.5 * rng.normal(size=(5000, 2))
    >>> gm = DPSEPGaussianMixture(2, epsilon=1.0, bounds_X=(-4, 4), covariance=0.25,
    ...                           random_state=0).fit(X)
    >>> np.round(np.sort(gm.means_[:, 0]))
    array([-2.,  2.])
    >>> gm.privacy_spent_[0] <= 1.0
    True
    """

    _parameter_constraints: dict = {
        **CentralPrivacyEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "clip_norm": [Interval(Real, 0, None, closed="neither"), None],
        "damping": [Interval(Real, 0, 1, closed="right"), StrOptions({"auto"})],
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "averaging_fraction": [Interval(Real, 0, 1, closed="right")],
        "bounds_X": [tuple, list, np.ndarray, None],
        "covariance": [Interval(Real, 0, None, closed="neither")],
        "weights": ["array-like", None],
        "mean_prior": [Real, "array-like", None],
        "mean_precision_prior": [Interval(Real, 0, None, closed="neither"), None],
        "verbose": ["verbose", StrOptions({"bar"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components=1,
        *,
        epsilon=1.0,
        delta=1e-5,
        clip_norm=1.0,
        damping="auto",
        batch_size="auto",
        max_iter=40,
        averaging_fraction=0.5,
        bounds_X=None,
        covariance=1.0,
        weights=None,
        mean_prior=None,
        mean_precision_prior=None,
        accountant="rdp",
        budget=None,
        secure=False,
        verbose=0,
        random_state=None,
    ):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.damping = damping
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.averaging_fraction = averaging_fraction
        self.bounds_X = bounds_X
        self.covariance = covariance
        self.weights = weights
        self.mean_prior = mean_prior
        self.mean_precision_prior = mean_precision_prior
        self.accountant = accountant
        self.budget = budget
        self.secure = secure
        self.verbose = verbose
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, **fit_params):
        """Fit the (private) SEP posterior over the component means.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data (dense, finite).
        y : Ignored
            Not used, present for API consistency.
        **fit_params : dict
            None accepted: ``sample_weight`` raises a TypeError saying why.

        Returns
        -------
        self : DPSEPGaussianMixture
            The fitted estimator.
        """
        self._refuse_fit_params(fit_params)
        X = validate_input(self, X, dtype=np.float64)
        X = np.asarray(X, dtype=np.float64)
        n_samples, n_features = X.shape
        if n_samples < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least 2 samples; got n_samples = "
                f"{n_samples}."
            )
        private = self._is_private
        if self.clip_norm is None and private:
            raise ValueError(
                "clip_norm=None (no clipping) is only allowed with epsilon=inf: the "
                "noise is calibrated to the clipped sites' norm."
            )
        weights = _check_weights(self.weights, self.n_components)
        mean_prior = _check_mean_prior(self.mean_prior, n_features)
        if self.damping != "auto":
            damping = float(self.damping)
        elif private:
            damping = min(1.0, _AUTO_PRIVATE_DAMPING_PASSES / self.max_iter)
        else:
            damping = 0.5
        batch_size = self.batch_size
        if batch_size == "auto":
            batch_size = max(1, n_samples // _AUTO_UPDATES_PER_PASS)
        # Every parameter is checked before the plan: a refused fit reserves
        # nothing against the budget and keeps the previous model. The scale
        # comes from the public bounds (from X only without them, a leak the
        # PrivacyLeakWarning states); nothing is released before the plan.
        offset, scale, box = _scaling(X, self.bounds_X, "bounds_X", private, "X")
        scale = float(np.max(scale))
        if not scale > 0:
            scale = 1.0
        if not self.covariance / scale / scale >= _MIN_SCALED_VARIANCE:
            raise ValueError(
                "covariance is negligible against the scale of X (below "
                f"{_MIN_SCALED_VARIANCE:g} of its square; the scale is the half-"
                "range of bounds_X, or X's standard deviation without bounds): "
                "give covariance in the units of X, and check X for outliers or "
                "set bounds_X."
            )
        if (
            mean_prior is not None
            and box is not None
            and (np.any(mean_prior < box[0]) or np.any(mean_prior > box[1]))
        ):
            # The component means lie in the box (the data are clipped to it
            # and so are the posterior means): a prior outside it would pull
            # the returned means out of it.
            raise ValueError("mean_prior must lie within bounds_X.")
        engine = self._start_privacy(n_samples, batch_size)
        self.damping_ = damping
        self.X_offset_, self.X_scale_, self._X_box = offset, scale, box
        Z = _apply_scaling(
            X, offset, np.full(n_features, scale), box, "bounds_X", warn=not private
        )

        prior_mean = np.zeros(n_features) if mean_prior is None else (mean_prior - offset) / scale
        prior_precision = (
            1.0 if self.mean_precision_prior is None
            else float(self.mean_precision_prior) * scale**2
        )
        model = _MixtureModel(
            self.n_components,
            n_features,
            self.covariance / scale**2,
            np.log(weights),
            prior_mean,
            prior_precision,
            n_samples,
            _INIT_SPREAD,
            _INIT_STRENGTH,
        )
        factor, posterior_noise = _fit_sep(
            model,
            Z,
            np.zeros(n_samples),
            damping=self.damping_,
            clip_norm=self.clip_norm,
            engine=engine,
            n_passes=self.max_iter,
            averaging_fraction=self.averaging_fraction,
            learn_prior=False,
            random_state=check_random_state(self.random_state),
            progress=self._make_progress(self.max_iter),
        )
        self.n_iter_ = self.max_iter
        self._model = model
        self._posterior = model.prior() + n_samples * factor
        means, variance = model.moments(self._posterior, posterior_noise)
        self.means_ = offset + scale * means
        self.means_variance_ = scale**2 * variance
        self.means_covariance_ = self.means_variance_[:, None, None] * np.eye(n_features)
        self.covariances_ = np.full(self.n_components, float(self.covariance))
        self.weights_ = weights
        self._n_features_out = self.n_components
        return self

    def _log_joint(self, X):
        """``log pi_k + log N(x; means_[k], (covariance + means_variance_[k]) I)``."""
        check_is_fitted(self)
        X = validate_input(self, X, dtype=np.float64, reset=False)
        X = np.asarray(X, dtype=np.float64)
        spread = self.covariances_ + self.means_variance_
        distance = (
            np.einsum("ij,ij->i", X, X)[:, None]
            - 2.0 * X @ self.means_.T
            + np.einsum("ij,ij->i", self.means_, self.means_)[None, :]
        )
        np.maximum(distance, 0.0, out=distance)
        d = X.shape[1]
        return (
            np.log(self.weights_)
            - 0.5 * d * np.log(2.0 * np.pi * spread)
            - distance / (2.0 * spread)
        )

    def score_samples(self, X):
        """Log posterior predictive density of each sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        log_density : ndarray of shape (n_samples,)
            ``log sum_k pi_k N(x; means_[k], (covariances_[k] + means_variance_[k]) I)``.
        """
        return logsumexp(self._log_joint(X), axis=1)

    def sample(self, n_samples=1):
        """Draw samples from the posterior predictive distribution.

        As scikit-learn's ``GaussianMixture.sample``: the number of samples of
        each component is multinomial with probabilities ``weights_``, and
        component ``k``'s are drawn from ``N(means_[k], (covariances_[k] +
        means_variance_[k]) I)``, the density :meth:`score_samples`
        evaluates; they come out grouped by component. The draws follow
        ``random_state``. Post-processing of the fitted posterior: sampling
        spends no privacy.

        Parameters
        ----------
        n_samples : int, default=1
            Number of samples, at least 1.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            The samples.
        y : ndarray of shape (n_samples,)
            The component of each sample.
        """
        check_is_fitted(self)
        if not (isinstance(n_samples, Integral) and n_samples >= 1):
            raise ValueError(
                f"n_samples must be an integer of at least 1; got {n_samples!r}."
            )
        rng = check_random_state(self.random_state)
        counts = rng.multinomial(n_samples, self.weights_)
        scales = np.sqrt(self.covariances_ + self.means_variance_)
        X = np.vstack(
            [
                mean + scale * rng.standard_normal((count, mean.size))
                for mean, scale, count in zip(self.means_, scales, counts)
            ]
        )
        y = np.repeat(np.arange(counts.size), counts)
        return X, y

    def score(self, X, y=None):
        """Mean log posterior predictive density of the samples.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        log_likelihood : float
            The mean of :meth:`score_samples`.
        """
        return float(np.mean(self.score_samples(X)))

    def predict_proba(self, X):
        """Posterior probability of each component for each sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        resp : ndarray of shape (n_samples, n_components)
            Responsibilities under the posterior predictive.
        """
        log_joint = self._log_joint(X)
        return np.exp(log_joint - logsumexp(log_joint, axis=1, keepdims=True))

    def predict(self, X):
        """The most probable component of each sample.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Component labels.
        """
        return np.argmax(self._log_joint(X), axis=1)

    def fit_predict(self, X, y=None):
        """Fit, then predict the components of the training samples.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Component labels.
        """
        return self.fit(X).predict(X)

    def transform(self, X):
        """The responsibilities (:meth:`predict_proba`) as features.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        resp : ndarray of shape (n_samples, n_components)
            Responsibilities.
        """
        return self.predict_proba(X)
