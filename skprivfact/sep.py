"""Differentially private stochastic expectation propagation for regression."""

import math
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.special import erfcx
from sklearn.base import (
    RegressorMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._pbp_kernels import (
    mlp_clipped_mean_site_sum,
    mlp_mean_sites,
    mlp_predictive_moments,
    mlp_sites,
    noise_sites,
)
from .accounting import calibrate_noise_multiplier
from .base import CentralPrivacyEstimator, NamedOutputMixin
from .exceptions import PrivacyLeakWarning
from .mechanisms import _row_clip_arguments, clip_rows, project_psd
from .utils._validation import as_float64, validate_input

__all__ = ["DPSEPRegressor"]

# Gamma(shape, rate) prior of the noise precision, in units of the scaled
# target: worth two rows (shape 1 + 2/2) with a noise variance of 0.1
# (rate 2 * 0.1 / 2). Probabilistic backpropagation's Gamma(6, 6) is worth a
# dozen rows of variance 1, which outweighs the data when the target is scaled
# by public bounds and the noise is a few percent of the range.
_NOISE_PRIOR_SHAPE = 2.0
_NOISE_PRIOR_RATE = 0.1
# Gamma(shape, rate) hyperprior of the weights' prior precision under
# prior_precision="auto", probabilistic backpropagation's Gamma(6, 6).
_PRIOR_PRECISION_SHAPE = 6.0
_PRIOR_PRECISION_RATE = 6.0
# Expected batch size of the network model under batch_size="auto":
# n_samples // _AUTO_MLP_ROWS_PER_UPDATE, between 1 and _AUTO_MLP_BATCH_SIZE.
# Small batches let the factor follow the cavity as probabilistic
# backpropagation's one-row updates do (a few hundred updates per pass keep
# small data sets from stalling); 32 rows keep the per-update overhead below
# the rows' own cost on large ones.
_AUTO_MLP_BATCH_SIZE = 32
_AUTO_MLP_ROWS_PER_UPDATE = 256
# Under noise, batch_size="auto" of the network model is n_samples //
# _AUTO_PRIVATE_MLP_ROWS_PER_UPDATE, between 1 and _AUTO_PRIVATE_MLP_BATCH_SIZE:
# with the small private damping, fewer and larger updates reach the same
# noise (the noise section of benchmarks/bench_sep.py) in less time.
_AUTO_PRIVATE_MLP_BATCH_SIZE = 128
_AUTO_PRIVATE_MLP_ROWS_PER_UPDATE = 32
# Under damping="auto", batches of the network model of up to this many rows
# update at full weight without noise; larger ones at weight this / batch_size.
_AUTO_MLP_FULL_DAMPING_ROWS = 16
# damping="auto" of both models under noise is min(1, this / max_iter): the
# data-independent start's weight in the factor, exp(-damping * passes), falls
# to 2%, and the factor the sites are computed at averages the noise of about
# max_iter / this passes' releases. The smaller the damping, the smaller the
# noise (the noise and floor sections of benchmarks/bench_sep.py), as long as
# the factor forgets its start.
_AUTO_PRIVATE_DAMPING_PASSES = 4.0
# Under noise with scaling_share > 0, a bounded column's map sends its
# released mean +- this many (released) standard deviations to [-1, 1].
_SCALING_WIDTH = 2.5
# scaling_share="auto" spends this share where its release's means would carry
# noise of std at most _AUTO_SCALING_MAX_NOISE (in half-widths of the bounds),
# so that it can narrow a column's map to half its bounds or less
# (_SCALING_WIDTH * sqrt(2 * 0.02) = 0.5); below that (few rows for the
# columns and epsilon) the budget is better left to the fit.
_AUTO_SCALING_SHARE = 0.1
_AUTO_SCALING_MAX_NOISE = 0.02
# max_iter="auto": _AUTO_PASSES passes under noise (the noise is calibrated
# for them) and for the linear model; without noise the network makes about
# _AUTO_MLP_ROW_UPDATES row updates, between _AUTO_PASSES and
# _AUTO_MLP_MAX_PASSES passes. Its factor moves by a few rows per update, so
# on a few hundred rows 40 passes stop it short of where it settles (chosen on
# validation splits of the small UCI sets; data sets of 5000 rows or more get
# 40 passes).
_AUTO_PASSES = 40
_AUTO_MLP_ROW_UPDATES = 200_000
_AUTO_MLP_MAX_PASSES = 400
# mean_update="adam": the share of the updates that run SEP first (the
# precisions, noise Gamma and means it reaches start the Adam phase), and
# the weight of the precision sites in the released vector, below that of
# the gradients, which then keep more of the clipped norm. Chosen on
# validation rows (benchmarks/bench_sep_dpsgd.py --explore-sep, which sets
# these constants; kin8nm, naval and power-plant at epsilon 1, means of 4
# fits): a weight of 0.1 was best on kin8nm and naval and 0.2% behind 0.3
# on power-plant, and a weight of 1 was 3% to 5% worse than 0.1 on all
# three; warm-up shares of 0.03, 0.1 and 0.3 were within 3% of one another,
# less than the defaults' own runs differ (up to 4% on kin8nm).
_ADAM_WARMUP_FRACTION = 0.1
_ADAM_PRECISION_WEIGHT = 0.1
# adam_sites="means": the weight of the Gauss-Newton precision sites, below
# _ADAM_PRECISION_WEIGHT since those sites are larger than the cavity's on
# well-fitted rows (and would take the clipped norm from the gradient).
# Chosen with bench_sep_dpsgd.py --explore-sep on naval, kin8nm and
# power-plant (the probe _ADAM_SITE_VARIANCE_SCALE, whose limit these sites
# are): on naval's validation rows at epsilon 3, 0.0036 against the
# cavity's 0.0053 (4 fits each); at epsilon 1 (clip_norm=3, step 0.3,
# linear, 100 passes, 6 fits each) 0.001 gave 0.0044 against 0.0047, within
# the fits' spread (0.0023 to 0.0070). There is no warm-up: the noise
# variance in the released gradients is the prior's, fixed, since one
# learned from noisy warm-up releases rescaled the gradients against
# clip_norm differently in every fit (on naval at epsilon 3, validation RMSE
# from 0.0016 to 0.0048 as it went from 0.08 to 0.37).
_ADAM_MEANS_PRECISION_WEIGHT = 0.01
# batch_size="auto" under mean_update="adam": n_samples // 32 rows between 1
# and this many (the batch of the validated settings).
_AUTO_PRIVATE_ADAM_BATCH_SIZE = 256
# averaging_fraction="auto": SEP's factor averages the last half of its
# updates; Adam's means the last 5% (a long average lags behind a descent
# that is still moving: by the same validation runs, naval's RMSE rose by
# 5% at 0.2 and 12% at 0.5; kin8nm and power-plant moved less than the
# defaults' own runs differ).
_AUTO_SEP_AVERAGING = 0.5
_AUTO_ADAM_AVERAGING = 0.05
# mean_update="adam" with a learned noise level: one more release, over
# every row, of the squared residuals of the fitted means (scaled units)
# clipped to _RESIDUAL_CLIP, taking _NOISE_VARIANCE_SHARE of the budget. The
# noise Gamma's coordinates share the clipped vector with the network's
# many weights and drown in its noise (the learned noise variance varied by
# a factor 1.5 to 10 between fits); this one number does not.
_RESIDUAL_CLIP = 1.0
_NOISE_VARIANCE_SHARE = 0.02
# Range of the noise precision (scaled units) that weights the linear model's
# Gamma coordinates in the released vector (_LinearModel.release_weights).
_RELEASE_TAU_MIN = 1.0
_RELEASE_TAU_MAX = 1e4


def _check_bounds(bounds, n_columns, name):
    """Validate ``(lower, upper)`` and broadcast both to ``n_columns`` floats."""
    try:
        lower, upper = bounds
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a pair (lower, upper) of scalars or arrays; got {bounds!r}."
        ) from None
    try:
        lower = np.asarray(lower, dtype=np.float64)
        upper = np.asarray(upper, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must hold numbers; got {bounds!r}.") from None
    try:
        lower = np.broadcast_to(lower, (n_columns,)).copy()
        upper = np.broadcast_to(upper, (n_columns,)).copy()
    except ValueError:
        raise ValueError(
            f"{name}: lower and upper must be scalars or of length {n_columns}; got "
            f"shapes {lower.shape} and {upper.shape}."
        ) from None
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError(f"{name} must be finite.")
    if np.any(lower >= upper):
        raise ValueError(f"{name}: every lower bound must be below its upper bound.")
    with np.errstate(over="ignore"):
        finite_range = np.all(np.isfinite(upper - lower))
    if not finite_range:
        raise ValueError(f"{name}: every range upper - lower must be a finite float.")
    return lower, upper


def _scaling(values, bounds, name, private, warn_name):
    """Offset and scale mapping ``values`` to about [-1, 1], and the clip box.

    With bounds the map sends [lower, upper] onto [-1, 1] and values are
    clipped to the box; without, values are standardized with their own mean
    and standard deviation (a leak when ``private``).
    """
    n_columns = values.shape[1]
    if bounds is not None:
        lower, upper = _check_bounds(bounds, n_columns, name)
        return (lower + upper) / 2, (upper - lower) / 2, (lower, upper)
    if private:
        warnings.warn(
            f"{name} is None: {warn_name} is standardized with its own mean and "
            "standard deviation, which reveals them and is not covered by the privacy "
            f"guarantee; set {name} to bounds fixed independently of the data.",
            PrivacyLeakWarning,
        )
    offset = values.mean(axis=0)
    scale = values.std(axis=0)
    return offset, scale, None


def _apply_scaling(values, offset, scale, box, name, warn=True):
    """Clip ``values`` to ``box`` and map them; ``warn`` says if any was clipped.

    A private fit clips its training records silently: whether one of them
    lies outside the bounds is not released.
    """
    if box is not None:
        outside = np.any(values < box[0]) or np.any(values > box[1])
        if outside and warn:
            warnings.warn(
                f"Some values lie outside {name}; they were clipped to the bounds.",
                UserWarning,
            )
        values = np.clip(values, box[0], box[1])
    return (values - offset) / scale


def _released_location_scale(blocks, engine, width=_SCALING_WIDTH):
    """Re-centre and re-scale each bounded column's map by its released
    location and scale.

    ``blocks`` holds ``(values, offset, scale, box)`` of the bounded columns
    (inputs, target), ``values`` of shape (n_samples, k). Each record's values,
    clipped to the box and mapped to [-1, 1], and their squares form one
    vector of norm at most 1 once divided by ``sqrt(2 d)`` (``d`` columns in
    all); the sum is released once over every record (the plan's preliminary
    release). From the released means ``m`` and variances ``v`` (in the
    bounds' units, half-widths) each column's map sends ``m - w`` and ``m + w``
    to -1 and 1, with ``w = width * sqrt(v + 2 tau)`` (``tau`` the noise std
    of a released mean or second moment, so that the noise rarely makes the
    map narrower than the data) and at most 1: most of a column's values then
    map into [-1, 1], and a column whose estimate the noise swamps keeps the
    map of its bounds. Values are still clipped to the bounds only, so the
    scaled values of a column's tails (or of the rare value of a skewed
    one) may lie beyond [-1, 1]. Post-processing of the release; returns the
    ``(offset, scale)`` of every block, in its units.
    """
    mapped = np.hstack(
        [_apply_scaling(values, offset, scale, box, "", warn=False)
         for values, offset, scale, box in blocks]
    )
    n_samples, n_columns = mapped.shape
    norm = math.sqrt(2 * n_columns)
    contributions = clip_rows(np.hstack([mapped, mapped**2]) / norm, 1.0)
    (released,) = engine.release([contributions.sum(axis=0)], [1.0], preliminary=True)
    (noise_std,) = engine.noise_scales([1.0], preliminary=True)
    released = released * (norm / n_samples)
    tau = noise_std * norm / n_samples
    mean = np.clip(released[:n_columns], -1.0, 1.0)
    variance = np.maximum(released[n_columns:] - mean**2, 0.0)
    half_width = np.minimum(1.0, width * np.sqrt(variance + 2.0 * tau))
    centre = np.clip(mean, half_width - 1.0, 1.0 - half_width)
    maps, start = [], 0
    for values, offset, scale, _ in blocks:
        k = values.shape[1]
        maps.append(
            (offset + scale * centre[start : start + k], scale * half_width[start : start + k])
        )
        start += k
    return maps


def _noise_variance(fixed, shape, rate):
    """The fixed noise variance, or the mean of 1 / precision under Gamma(shape, rate)."""
    return fixed if fixed is not None else rate / (shape - 1.0)


class _LinearModel:
    """Bayesian linear regression with a full-covariance Gaussian factor.

    The factor's natural parameters are stacked in one vector: the precision
    matrix's upper triangle with off-diagonal entries times sqrt(2) (so that
    the vector's Euclidean norm is the matrix's Frobenius norm), the precision
    times the mean, then the noise Gamma's (shape, rate) change.
    """

    def __init__(self, n_inputs, prior_precision, noise_variance):
        self.n_coef = n_inputs + 1
        self.prior_precision = prior_precision
        self.noise_variance = noise_variance
        self.upper = np.triu_indices(self.n_coef)
        self.upper_weight = np.where(self.upper[0] == self.upper[1], 1.0, math.sqrt(2.0))
        self.n_triangle = self.upper[0].size
        self.size = self.n_triangle + self.n_coef + 2

    def design(self, X):
        return np.hstack([X, np.ones((X.shape[0], 1))])

    def prior(self):
        theta = np.zeros(self.size)
        diagonal = self.upper[0] == self.upper[1]
        theta[: self.n_triangle][diagonal] = self.prior_precision
        theta[-2:] = (_NOISE_PRIOR_SHAPE, _NOISE_PRIOR_RATE)
        return theta

    def initial_factor(self, random_state, n_samples):
        return np.zeros(self.size)

    def release_weights(self, cavity):
        """Weights of the coordinates in the clipped, noised vector.

        A row's weight sites scale with the noise precision ``tau`` (``x x' tau``,
        ``x y tau``), its Gamma site does not (shape 1/2, rate ``(y - x'w)**2 / 2``):
        unweighted, the Gamma's two coordinates would be a small part of the
        clipped vector and drown in the noise. Weighting the shape by ``tau``
        and the rate by ``tau**2`` (``tau`` the cavity's mean noise precision,
        a released quantity) puts the blocks on a par. ``tau`` is kept within
        [1, 1e4] (noise standard deviations from 1 to 0.01 in the scaled
        units of ``y``, which lie in [-1, 1]): under heavy noise a small
        ``tau`` would otherwise let the rate's noise, divided by ``tau**2``,
        drive ``tau`` smaller still.
        """
        if self.noise_variance is not None:
            return None
        weights = np.ones(self.size)
        tau = min(max(cavity[-2] / cavity[-1], _RELEASE_TAU_MIN), _RELEASE_TAU_MAX)
        weights[-2:] = (tau, tau**2)
        return weights

    def unpack(self, theta):
        precision = np.zeros((self.n_coef, self.n_coef))
        precision[self.upper] = theta[: self.n_triangle] / self.upper_weight
        precision = precision + np.triu(precision, 1).T
        shift = theta[self.n_triangle : self.n_triangle + self.n_coef]
        return precision, shift, theta[-2], theta[-1]

    def moments(self, theta, noise_std=0.0):
        precision, shift, shape, rate = self.unpack(theta)
        covariance = np.linalg.inv(precision)
        covariance = (covariance + covariance.T) / 2
        mean = covariance @ shift
        if noise_std > 0:
            mean, covariance = _denoise_linear(
                mean, covariance, noise_std, self.prior_precision
            )
        return mean, covariance, shape, rate

    def noise_var(self, shape, rate):
        return _noise_variance(self.noise_variance, shape, rate)

    def second_moment(self, theta):
        mean, covariance, _, _ = self.moments(theta)
        return float(mean @ mean + np.trace(covariance)), self.n_coef

    def sites(self, X, y, cavity, noise_std=0.0):
        mean, covariance, shape, rate = self.moments(cavity, noise_std)
        rows = self.design(X)
        noise_var = self.noise_var(shape, rate)
        sites = np.empty((rows.shape[0], self.size))
        # Gaussian likelihood: the tilted distribution is Gaussian and the site
        # is the likelihood itself, x x' / s^2 and x y / s^2.
        sites[:, : self.n_triangle] = (
            rows[:, self.upper[0]] * rows[:, self.upper[1]] * (self.upper_weight / noise_var)
        )
        sites[:, self.n_triangle : self.n_triangle + self.n_coef] = rows * (y / noise_var)[:, None]
        if self.noise_variance is None:
            out_mean = rows @ mean
            out_var = np.einsum("ij,jk,ik->i", rows, covariance, rows)
            sites[:, -2:] = noise_sites(y, out_mean, out_var, shape, rate)
        else:
            sites[:, -2:] = 0.0
        return sites

    def project(self, factor, previous):
        """Nearest factor whose precision is PSD and noise change non-negative."""
        precision, shift, shape, rate = self.unpack(factor)
        precision = project_psd(precision, floor=0.0)
        out = np.empty_like(factor)
        out[: self.n_triangle] = precision[self.upper] * self.upper_weight
        out[self.n_triangle : self.n_triangle + self.n_coef] = shift
        out[-2] = max(shape, 0.0)
        out[-1] = max(rate, 0.0)
        return out

    def predict_moments(self, theta, X, noise_std=0.0):
        mean, covariance, shape, rate = self.moments(theta, noise_std)
        rows = self.design(X)
        out_var = np.einsum("ij,jk,ik->i", rows, covariance, rows)
        return rows @ mean, out_var, self.noise_var(shape, rate)


class _NetworkModel:
    """One hidden ReLU layer, factorized Gaussian weights (probabilistic backpropagation).

    Natural-parameter vector: each weight's precision, then precision times
    mean, then the noise Gamma's (shape, rate) change.
    """

    def __init__(self, n_inputs, n_hidden, prior_precision, noise_variance):
        self.n_inputs = n_inputs
        self.n_hidden = n_hidden
        self.n_weights = n_hidden * (n_inputs + 1) + n_hidden + 1
        self.prior_precision = prior_precision
        self.noise_variance = noise_variance
        self.size = 2 * self.n_weights + 2

    def prior(self):
        theta = np.zeros(self.size)
        theta[: self.n_weights] = self.prior_precision
        theta[-2:] = (_NOISE_PRIOR_SHAPE, _NOISE_PRIOR_RATE)
        return theta

    def initial_factor(self, random_state, n_samples):
        # Random means break the symmetry between hidden units, drawn as in
        # probabilistic backpropagation (std one over the square root of the
        # layer's input length); they are data-independent and decay away as
        # the sites replace the factor.
        n_first = self.n_hidden * (self.n_inputs + 1)
        means = np.empty(self.n_weights)
        means[:n_first] = random_state.normal(size=n_first) / math.sqrt(self.n_inputs + 1)
        means[n_first:] = random_state.normal(size=self.n_hidden + 1) / math.sqrt(
            self.n_hidden + 1
        )
        factor = np.zeros(self.size)
        factor[self.n_weights : 2 * self.n_weights] = self.prior_precision * means / n_samples
        return factor

    def release_weights(self, cavity):
        # The network's weight sites do not scale with the noise precision as
        # the linear model's do; weighting the Gamma as there made the private
        # UCI fits worse (kin8nm RMSE 0.18 -> 0.22).
        return None

    def moments(self, theta, noise_std=0.0):
        precision = theta[: self.n_weights]
        shift = theta[self.n_weights : 2 * self.n_weights]
        variance = 1.0 / precision
        mean = shift * variance
        if noise_std > 0:
            mean, variance = _denoise_weights(
                mean, variance, noise_std * variance, self.prior_precision
            )
        return mean, variance, theta[-2], theta[-1]

    def noise_var(self, shape, rate):
        return _noise_variance(self.noise_variance, shape, rate)

    def second_moment(self, theta):
        mean, variance, _, _ = self.moments(theta)
        return float(mean @ mean + variance.sum()), self.n_weights

    def sites(self, X, y, cavity, noise_std=0.0):
        mean, variance, shape, rate = self.moments(cavity, noise_std)
        learn = self.noise_variance is None
        return mlp_sites(
            X, y, mean, variance, self.n_hidden, shape, rate, learn,
            0.0 if learn else self.noise_variance,
        )

    def mean_sites(self, X, y, mean, cavity):
        """Per row, the precision sites and the log-likelihood's gradient at
        the weight means ``mean`` (the limit of :meth:`sites` as the weight
        variances vanish), the noise variance that of ``cavity``'s Gamma."""
        shape, rate = cavity[-2], cavity[-1]
        return mlp_mean_sites(X, y, mean, self.n_hidden, self.noise_var(shape, rate))

    def clipped_mean_site_sum(self, X, y, rows, mean, cavity, precision_weight, clip_arguments):
        """The sum over ``rows`` of :meth:`mean_sites`'s rows, the precision
        sites times ``precision_weight``, each row clipped as ``clip_rows``
        clips (``clip_arguments`` from ``mechanisms._row_clip_arguments``)
        and dropped if not finite, in one pass per row."""
        shape, rate = cavity[-2], cavity[-1]
        return mlp_clipped_mean_site_sum(
            X, y, rows, mean, self.n_hidden, self.noise_var(shape, rate),
            precision_weight, *clip_arguments,
        )

    def project(self, factor, previous):
        # A weight whose averaged site precision came out negative keeps its
        # previous site: projecting the precision alone would leave its
        # precision-times-mean, and so its mean, unbounded.
        out = factor.copy()
        rejected = out[: self.n_weights] < 0
        out[: self.n_weights][rejected] = previous[: self.n_weights][rejected]
        out[self.n_weights : 2 * self.n_weights][rejected] = previous[
            self.n_weights : 2 * self.n_weights
        ][rejected]
        np.maximum(out[-2:], 0.0, out=out[-2:])
        return out

    def predict_moments(self, theta, X, noise_std=0.0):
        mean, variance, shape, rate = self.moments(theta, noise_std)
        out_mean, out_var = mlp_predictive_moments(
            np.ascontiguousarray(X), mean, variance, self.n_hidden
        )
        return out_mean, out_var, self.noise_var(shape, rate)


def _denoise_weights(mean, variance, mean_noise_std, prior_precision):
    """Shrink noisy posterior means by their empirical-Bayes factor.

    Under the prior ``N(0, 1 / prior_precision)`` the posterior means of the
    weights spread with variance ``1 / prior_precision - variance`` (law of
    total variance); a released mean carries privacy noise of std
    ``mean_noise_std`` on top, so its best linear estimate is the released
    mean times ``spread / (spread + noise variance)``, and the variance grows
    by what the estimate leaves unknown. Post-processing: it uses released
    values and public noise scales only.
    """
    spread = np.maximum(1.0 / prior_precision - variance, 0.0)
    noise_var = mean_noise_std**2
    with np.errstate(invalid="ignore", divide="ignore"):
        shrink = np.where(spread > 0, spread / (spread + noise_var), 0.0)
    return mean * shrink, variance + spread * (1.0 - shrink)


def _denoise_linear(mean, covariance, shift_noise_std, prior_precision):
    """Shrink a noisy full-covariance posterior mean by its empirical-Bayes factor.

    The released precision-times-mean carries privacy noise of std
    ``shift_noise_std`` per coordinate, so the mean ``covariance @ shift``
    carries noise of covariance ``S = shift_noise_std**2 covariance**2``.
    Under a prior ``N(0, T)`` on the mean (``T`` diagonal: ``1 /
    prior_precision`` for the coefficients, 1 for the intercept, the target's
    location in [-1, 1]), the best linear estimate of the mean is ``T (T +
    S)^-1`` times the released one, and the covariance grows by what it leaves
    unknown, ``T - T (T + S)^-1 T``. Post-processing: released values and public noise scales only.
    When the data say little (small n or epsilon) the mean shrinks to the
    prior's instead of carrying the noise.
    """
    # The intercept (last) is the target's location in [-1, 1]: variance 1.
    spread = np.full(mean.size, 1.0 / prior_precision)
    spread[-1] = max(spread[-1], 1.0)
    # In the prior's units, D = T^(1/2): T (T + S)^-1 = D (I + R)^-1 D^-1
    # with R = D^-1 S D^-1 = V diag(lam) V'. The eigenvalues of I + R are at
    # least 1 whatever the noise (a solve with T + S itself turns singular
    # once S swamps T in floating point).
    root = np.sqrt(spread)
    scaled_noise = shift_noise_std**2 * (covariance @ covariance) / np.outer(root, root)
    lam, vectors = np.linalg.eigh((scaled_noise + scaled_noise.T) / 2)
    lam = np.maximum(lam, 0.0)
    kept = vectors @ ((vectors.T @ (mean / root)) / (1.0 + lam))
    shrunk_mean = root * kept
    unknown = (vectors * (lam / (1.0 + lam))) @ vectors.T * np.outer(root, root)
    covariance = covariance + (unknown + unknown.T) / 2
    return shrunk_mean, covariance


def _factor_noise_std(noise_std, decay, n_steps, first_averaged):
    """Std of the noise in one coordinate of the running and the averaged factor.

    The factor follows ``f_t = (1 - decay) f_(t-1) + ... + noise_t``; returns
    the stationary std of the running factor's noise and the std of the noise
    in the average of ``f_t`` over ``first_averaged <= t < n_steps``.
    """
    if noise_std == 0:
        return 0.0, 0.0
    running = noise_std / math.sqrt(decay * (2.0 - decay))
    steps = np.arange(n_steps)
    n_averaged = n_steps - first_averaged
    # Noise drawn at step s reaches f_t with weight (1 - decay)**(t - s); its
    # weight in the average is the sum of those over the averaged t >= s.
    start = np.maximum(steps, first_averaged)
    weights = (
        (1.0 - decay) ** (start - steps) - (1.0 - decay) ** (n_steps - steps)
    ) / (decay * n_averaged)
    return running, noise_std * float(np.sqrt(np.sum(weights**2)))


def _clip_vector(vector, max_norm):
    return clip_rows(vector[np.newaxis, :], max_norm)[0]


def _prior_precision_update(model, posterior):
    """Mean of q(precision) given q(weights), under the Gamma hyperprior."""
    second_moment, n_weights = model.second_moment(posterior)
    return (_PRIOR_PRECISION_SHAPE + n_weights / 2) / (
        _PRIOR_PRECISION_RATE + second_moment / 2
    )


class _AdamMeans:
    """The network's weight means moved by Adam, their precisions by damped SEP.

    Starts from a (warm-up) factor: the means of its posterior (shrunk by the
    noise std ``posterior_noise`` they carry), its weight-precision site, and
    its noise Gamma site, which stays fixed from then on. Each :meth:`update`
    is one release (see :func:`_fit_sep`).
    """

    _BETA1, _BETA2, _EPS = 0.9, 0.999, 1e-8

    def __init__(
        self, model, prior, factor, n_samples, posterior_noise, learning_rate,
        n_updates_planned, linear_decay, sites="cavity",
    ):
        n_weights = model.n_weights
        self.sites = sites
        self.precision_weight = (
            _ADAM_MEANS_PRECISION_WEIGHT if sites == "means" else _ADAM_PRECISION_WEIGHT
        )
        self.prior = prior
        self.n_samples = n_samples
        self.learning_rate = learning_rate
        self.n_updates_planned = n_updates_planned
        self.linear_decay = linear_decay
        self.mean = model.moments(prior + n_samples * factor, posterior_noise)[0].copy()
        self.site_precision = factor[:n_weights].copy()
        self.noise_site = factor[2 * n_weights :].copy()
        self.first_moment = np.zeros(n_weights)
        self.second_moment = np.zeros(n_weights)
        self.n_updates = 0
        self.mean_sum = np.zeros(n_weights)
        self.site_precision_sum = np.zeros(n_weights)
        self.n_averaged = 0

    def _cavity(self, n_weights):
        precision = self.prior[:n_weights] + (self.n_samples - 1) * self.site_precision
        noise = self.prior[2 * n_weights :] + (self.n_samples - 1) * self.noise_site
        return np.concatenate([precision, precision * self.mean, noise])

    def update(self, model, X, y, engine, clip_norm, damping, average):
        n_weights = model.n_weights
        n_samples = self.n_samples
        sample_rate = engine.plan.sample_rate
        batch = engine.sample(n_samples)
        precision_weight = self.precision_weight
        clip_arguments = None
        if clip_norm is not None and self.sites == "means":
            clip_arguments = _row_clip_arguments(2 * n_weights, clip_norm)
        if clip_arguments is not None:
            # The sites, their clipping and their sum in one pass per row: the
            # same floats as the branch below, without the batch's array.
            contribution_sum = model.clipped_mean_site_sum(
                X, y, batch, self.mean, self._cavity(n_weights), precision_weight,
                clip_arguments,
            )
        elif batch.size:
            if self.sites == "means":
                contributions = model.mean_sites(
                    X[batch], y[batch], self.mean, self._cavity(n_weights)
                )
                with np.errstate(over="ignore", invalid="ignore"):
                    contributions[:, :n_weights] *= precision_weight
            else:
                sites = model.sites(X[batch], y[batch], self._cavity(n_weights))
                precision_sites = sites[:, :n_weights]
                # The shift site less the mean times the precision site is
                # the gradient of log Z in the mean times (cavity / tilted
                # variance): its noise does not grow with the weight's
                # precision.
                with np.errstate(over="ignore", invalid="ignore"):
                    contributions = np.concatenate(
                        [
                            precision_weight * precision_sites,
                            sites[:, n_weights : 2 * n_weights] - self.mean * precision_sites,
                        ],
                        axis=1,
                    )
            # A row whose sites overflowed contributes nothing (a map of the
            # row alone: the sensitivity holds), silently.
            contributions[~np.isfinite(contributions).all(axis=1)] = 0.0
            if clip_norm is not None:
                contributions = clip_rows(contributions, clip_norm)
            contribution_sum = contributions.sum(axis=0)
        else:
            contribution_sum = np.zeros(2 * n_weights)
        (released_sum,) = engine.release(
            [contribution_sum], [math.inf if clip_norm is None else clip_norm]
        )
        site_precision = (1.0 - damping * sample_rate) * self.site_precision + (
            damping / n_samples
        ) * (released_sum[:n_weights] / precision_weight)
        # A precision the noise would turn negative keeps its previous value.
        self.site_precision = np.where(site_precision > 0, site_precision, self.site_precision)
        gradient = (
            released_sum[n_weights:] / (sample_rate * n_samples)
            - model.prior_precision * self.mean / n_samples
        )
        self.n_updates += 1
        self.first_moment += (1.0 - self._BETA1) * (gradient - self.first_moment)
        self.second_moment += (1.0 - self._BETA2) * (gradient**2 - self.second_moment)
        step = (self.first_moment / (1.0 - self._BETA1**self.n_updates)) / (
            np.sqrt(self.second_moment / (1.0 - self._BETA2**self.n_updates)) + self._EPS
        )
        learning_rate = self.learning_rate
        if self.linear_decay:
            # Falls linearly from learning_rate at the first update to
            # learning_rate / n_updates_planned at the last.
            learning_rate *= 1.0 - (self.n_updates - 1) / self.n_updates_planned
        self.mean = self.mean + learning_rate * step
        if average:
            self.mean_sum += self.mean
            self.site_precision_sum += self.site_precision
            self.n_averaged += 1

    def noise_variance(self, model):
        """The noise variance of the cavity the sites are computed at."""
        return model.noise_var(*self._cavity(model.n_weights)[-2:])

    def factor(self, model, precision_scale=1.0):
        """The factor of the averaged means and precision sites (the latter
        times ``precision_scale``)."""
        n_weights = model.n_weights
        prior, n_samples = self.prior, self.n_samples
        mean = self.mean_sum / self.n_averaged
        site_precision = precision_scale * self.site_precision_sum / self.n_averaged
        precision = prior[:n_weights] + n_samples * site_precision
        shift = (precision * mean - prior[n_weights : 2 * n_weights]) / n_samples
        return np.concatenate([site_precision, shift, self.noise_site])


def _truncated_normal_mean(loc, scale, upper):
    """Mean of the normal ``N(loc, scale**2)`` truncated to ``[0, upper]``,
    finite however far ``loc`` lies outside the interval."""
    if loc > upper / 2:
        # Mirrored, so that the lower end is the nearer one (a + b >= 0).
        return upper - _truncated_normal_mean(upper - loc, scale, upper)
    a, b = -loc / scale, (upper - loc) / scale
    # pdf(a) / sf(a) and sf(b) / sf(a) through erfcx(x) = exp(x**2) erfc(x),
    # which keeps them finite in the far tail.
    erfcx_a = erfcx(a / math.sqrt(2))
    sf_ratio = erfcx(b / math.sqrt(2)) / erfcx_a * math.exp(0.5 * (a - b) * (a + b))
    mills = math.sqrt(2 / math.pi) / erfcx_a
    # (pdf(a) - pdf(b)) / (sf(a) - sf(b))
    ratio = mills * -math.expm1(0.5 * (a - b) * (a + b)) / (1.0 - sf_ratio)
    return loc + scale * ratio


def _released_noise_site(model, posterior, X, y, engine, y_range):
    """The noise Gamma's site from one release of the mean squared residual.

    Each row's squared residual under the posterior predictive mean (clipped
    to ``y_range``, as ``predict`` clips to ``bounds_y``) is clipped to
    ``_RESIDUAL_CLIP``, centred and scaled to [-1, 1] (norm at most 1); the
    sum is released once over every row, a preliminary release of the plan.
    The site ``[1/2, v/2]`` per row puts the posterior's noise variance at
    about ``v``: the mean of the true clipped mean square given the released
    one, under a flat prior on [0, ``_RESIDUAL_CLIP``] and the release's
    Gaussian noise (post-processing: its std is public), so that a release
    that the noise pushed towards or below zero does not set a noise level
    far below the residuals. Without noise the residuals are not clipped.
    """
    mean = model.predict_moments(posterior, X)[0]
    if y_range is not None:
        mean = np.clip(mean, y_range[0], y_range[1])
    squared = (mean - y) ** 2
    n_samples = y.size
    if engine.plan.preliminary_noise_multiplier > 0:
        half = _RESIDUAL_CLIP / 2
        # A row whose residual is not finite counts as clipped (a map of the
        # row alone: the sensitivity holds), so that no row can make the
        # release raise; np.minimum would pass a NaN through.
        squared = np.where(np.isfinite(squared), squared, _RESIDUAL_CLIP)
        contributions = (np.minimum(squared, _RESIDUAL_CLIP) - half) / half
        (released,) = engine.release([np.array([contributions.sum()])], [1.0], preliminary=True)
        mean_square = half * (1.0 + released[0] / n_samples)
        noise_std = half * engine.plan.preliminary_noise_multiplier / n_samples
        variance = _truncated_normal_mean(mean_square, noise_std, _RESIDUAL_CLIP)
        # Far below zero the mean underflows towards 0: keep a floor.
        variance = min(max(variance, 1e-4 * _RESIDUAL_CLIP), _RESIDUAL_CLIP)
    else:
        (released,) = engine.release([np.array([squared.sum()])], [math.inf], preliminary=True)
        variance = released[0] / n_samples
    return np.array([0.5, variance / 2])


def _fit_sep(
    model,
    X,
    y,
    *,
    damping,
    clip_norm,
    engine,
    n_passes,
    averaging_fraction,
    learn_prior,
    random_state,
    progress,
    mean_update="sep",
    learning_rate=None,
    learning_rate_schedule="constant",
    adam_sites="means",
    release_noise_variance=False,
    y_range=None,
):
    """Run (DP-)SEP.

    Returns the average of the released factors over the last
    ``averaging_fraction`` of the updates, and the std of the privacy noise in
    each natural parameter of the posterior built from that average
    (``n_samples`` times the factor's, unweighted coordinates; 0 without
    noise).

    Each update: ``engine`` draws a Poisson batch at its sampling rate
    ``q``; the sites at the cavity are clipped to ``clip_norm`` each and
    their sum is released with Gaussian noise of std ``noise_multiplier *
    clip_norm`` (one release, one accountant step); the factor moves to
    ``(1 - damping q) f + (damping / n_samples) * released sum``. The
    contributions are the sites alone, centred at zero, so replacing one row
    moves the release by at most ``2 clip_norm`` and adding or removing one
    by ``clip_norm``. The projection of the precisions and the clip of the
    factor are post-processing. Norms, clipping and noise are taken in the
    coordinates weighted by ``model.release_weights(cavity)`` (None:
    unweighted), a function of released values only.

    ``mean_update="adam"`` (the network): the first
    ``_ADAM_WARMUP_FRACTION`` of the updates are as above; then the noise
    Gamma's site stays where the warm-up left it and each update releases,
    per row and clipped to ``clip_norm`` as a whole, ``[w * precision site,
    gradient of log Z in the weight means]`` (``w =
    _ADAM_PRECISION_WEIGHT``): the precision factor moves by the damped
    update above, the means by one Adam step of size ``learning_rate`` on
    the released gradient plus the prior's (``learning_rate_schedule=
    "linear"``: times ``1 - u / U`` at the Adam phase's update ``u = 0, ...,
    U - 1``). With ``adam_sites="means"`` there is no warm-up, the weight is
    ``_ADAM_MEANS_PRECISION_WEIGHT``, and each row's sites are taken at the
    weight means (``model.mean_sites``: the log-likelihood's gradient and
    the Gauss-Newton precision) with the prior's noise variance; once the
    noise Gamma's site is released, the precision sites are rescaled from
    that variance to the posterior's (post-processing). Averages are then
    taken over the last ``averaging_fraction`` of these updates, and the
    returned noise std is 0 (the means are not a damped average of noisy
    sites). With
    ``release_noise_variance`` the noise Gamma's site then comes from
    :func:`_released_noise_site` (``y_range``: the target's bounds in scaled
    units, or None), released before the last progress line.
    """
    n_samples = X.shape[0]
    sample_rate = engine.plan.sample_rate
    prior = model.prior()
    factor = model.initial_factor(random_state, n_samples)
    if clip_norm is not None:
        factor = _clip_vector(factor, clip_norm)
    steps_per_pass = CentralPrivacyEstimator._releases_per_pass(sample_rate)
    n_steps = n_passes * steps_per_pass
    adam = mean_update == "adam"
    if not adam:
        warmup_steps = n_steps
    elif adam_sites == "means":
        warmup_steps = 0
    else:
        warmup_steps = min(round(_ADAM_WARMUP_FRACTION * n_steps), n_steps - 1)
    # Adam's iterates are averaged over its own updates only.
    n_averaging_pool = n_steps - warmup_steps if adam else n_steps
    first_averaged = n_steps - max(1, round(averaging_fraction * n_averaging_pool))
    factor_sum = np.zeros_like(factor)
    noise_multiplier = engine.plan.noise_multiplier
    sensitivity = math.inf if clip_norm is None else clip_norm
    noise_std = noise_multiplier * damping * sensitivity / n_samples if noise_multiplier else 0.0
    running_noise, averaged_noise = _factor_noise_std(
        noise_std, damping * sample_rate, n_steps, first_averaged
    )
    for step in range(n_steps):
        if step >= warmup_steps:
            if step == warmup_steps:
                means = _AdamMeans(
                    model,
                    prior,
                    factor,
                    n_samples,
                    # A factor that no release has moved carries no noise.
                    n_samples * running_noise if warmup_steps else 0.0,
                    learning_rate,
                    n_updates_planned=n_steps - warmup_steps,
                    linear_decay=learning_rate_schedule == "linear",
                    sites=adam_sites,
                )
            means.update(
                model, X, y, engine, clip_norm, damping, average=step >= first_averaged
            )
            if step == n_steps - 1:
                factor = means.factor(model)
                if release_noise_variance:
                    noise_site = _released_noise_site(
                        model, prior + n_samples * factor, X, y, engine, y_range
                    )
                    if adam_sites == "means":
                        # The precision sites are in units of the noise
                        # variance they were computed with: move them to
                        # the released one.
                        used = means.noise_variance(model)
                        noise = prior[-2:] + n_samples * noise_site
                        factor = means.factor(model, used / model.noise_var(*noise))
                    factor[-2:] = noise_site
            if (step + 1) % steps_per_pass == 0:
                progress.update(
                    (step + 1) // steps_per_pass, epsilon_spent=lambda: engine.spent[0]
                )
            continue
        cavity = prior + (n_samples - 1) * factor
        weights = model.release_weights(cavity) if clip_norm is not None else None
        if weights is None:
            weights = 1.0
        batch = engine.sample(n_samples)
        if batch.size:
            sites = model.sites(X[batch], y[batch], cavity, (n_samples - 1) * running_noise)
            if clip_norm is not None:
                sites = clip_rows(sites * weights, clip_norm)
            else:
                sites = sites * weights
            site_sum = sites.sum(axis=0)
        else:
            site_sum = np.zeros(factor.size)
        (released_sum,) = engine.release([site_sum], [sensitivity])
        previous = factor
        factor = (1.0 - damping * sample_rate) * factor + (damping / n_samples) * (
            released_sum / weights
        )
        factor = model.project(factor, previous)
        if clip_norm is not None:
            factor = _clip_vector(factor * weights, clip_norm) / weights
        if step >= first_averaged:
            factor_sum += factor
        if learn_prior and (step + 1) % steps_per_pass == 0:
            # Variational update of the prior precision from the released
            # posterior: post-processing, no privacy cost.
            model.prior_precision = _prior_precision_update(
                model, prior + n_samples * factor
            )
            prior = model.prior()
        if (step + 1) % steps_per_pass == 0:
            progress.update(
                (step + 1) // steps_per_pass, epsilon_spent=lambda: engine.spent[0]
            )
    progress.close()
    if adam:
        return factor, 0.0
    return factor_sum / (n_steps - first_averaged), n_samples * averaged_noise


class DPSEPRegressor(
    NamedOutputMixin, RegressorMixin, TransformerMixin, CentralPrivacyEstimator
):
    """Bayesian regression by differentially private stochastic expectation propagation.

    Privacy: (epsilon, delta)-differential privacy for replacing one row
    ``(x, y)`` by another (substitution: the number of rows ``n_samples``,
    which sets the sampling rate, the cavity and the scale of the update, is
    public). Stochastic
    expectation propagation (SEP) keeps one global factor ``f`` standing for
    the average likelihood of a row; the posterior is ``prior * f**n_samples``.
    Each update draws a Poisson-subsampled batch (rate ``q = batch_size /
    n_samples``), computes each row's site (moment matching of the tilted
    distribution at the cavity ``prior * f**(n_samples - 1)``) and clips its
    whole natural-parameter vector to Euclidean norm ``clip_norm``, and
    releases the sum of the clipped sites with Gaussian noise of standard
    deviation ``noise_multiplier_ * clip_norm`` on every coordinate (one row
    moves the sum by at most ``clip_norm`` if added or removed, and
    ``2 * clip_norm`` if replaced: the accountant's substitution relation);
    then ``f <- (1 - damping q) f + (damping / n) * released sum``. (For ``model="linear"`` with the noise level learned,
    these norms and this noise are taken with the noise Gamma's shape and rate
    coordinates weighted by ``tau`` and ``tau**2``, ``tau`` the cavity's mean
    noise precision, itself computed from released values: the weight sites
    scale with ``tau`` and the Gamma's do not, and unweighted the Gamma would
    drown in the noise.) The projection of the precisions onto the non-negative
    values (positive semi-definite matrices for the linear model) and the
    clip of ``f`` to norm ``clip_norm`` are post-processing. One accountant
    step per update; the noise multiplier is calibrated once per plan so that
    all ``max_iter`` passes (``max_iter * ceil(1 / q)`` updates) spend at most
    ``(epsilon, delta)``, and ``privacy_spent_`` is what the accountant
    (``accountant``) computed. Batches and noise come from the operating
    system's entropy, a fresh stream per release
    (:class:`~skprivfact.privacy.PrivacyEngine`); in a private fit
    ``random_state`` seeds only the network's initial means. A
    :class:`~skprivfact.privacy.PrivacyBudget` passed as ``budget`` is
    charged by every release. The
    returned posterior averages the released factors of the last updates
    (post-processing). A released mean is shrunk towards the prior by its
    empirical-Bayes factor given the known scale of the noise it carries
    (per weight for ``"mlp"``, jointly for ``"linear"``, whose intercept has
    prior variance 1), both at the cavity and in the returned posterior
    (post-processing too): when the data say little (small ``n_samples`` or
    ``epsilon``) predictions fall back to the prior's instead of carrying the
    noise. With ``bounds_y`` set, predictive means are clipped to it.
    Priors are fixed; the observation-noise precision has a Gamma factor that
    is part of the clipped, noised natural parameters (or is fixed by
    ``noise_variance``). Inputs and targets are mapped to [-1, 1]
    by ``bounds_X`` and ``bounds_y`` and clipped to them; with
    ``scaling_share`` (by default where the data are large enough for it),
    one more release, over every row before the updates, of the sum of each
    row's bounded columns so mapped and of their squares (norm at most
    ``sqrt(2 d)`` for ``d`` such columns, scaled to 1, with the plan's
    preliminary noise) re-centres and re-scales each map so that the
    released mean plus or minus 2.5 released standard deviations goes to
    [-1, 1], values still clipped to the bounds only (post-processing; the
    accountant composes this release with the updates, whose noise is
    calibrated to what it leaves). With ``mean_update="adam"`` the updates
    release each row's ``[0.01 * precision site, gradient]`` at the weight
    means instead (``adam_sites="cavity"``: after the warm-up, ``[0.1 *
    precision site, shift site - mean * precision site]`` at the cavity),
    clipped to ``clip_norm`` and noised alike (same multiplier, same
    accountant step), and, with the noise level learned, one more release
    over every row follows the updates: the sum of each row's squared
    residual (scaled units, predictive mean of the released posterior)
    clipped to 1, centred and scaled to norm 1, with the plan's preliminary
    noise; it takes 2% of the budget (shared equally with the scaling
    release when there is one), the updates being calibrated to the rest.
    The noise variance is the mean of the clipped mean square given that
    release and its public noise std (post-processing). Not covered:
    ``bounds_X=None`` or ``bounds_y=None``, which standardize with the data's
    own mean and standard deviation (a
    :class:`~skprivfact.exceptions.PrivacyLeakWarning` is issued and the
    fitted offsets and scales reveal them). Training rows outside the bounds
    are clipped without a warning. ``epsilon=float("inf")`` runs SEP without
    noise (unclipped by default, clipped with a ``clip_norm``).

    Raw data: with ``epsilon=float("inf")`` and the defaults (no bounds, the
    network, no clipping) inputs and target are standardized inside the
    estimator and predictions come back in the target's units, so no
    preprocessing is needed. Under noise, set ``bounds_X`` and ``bounds_y``
    from knowledge fixed independently of the data (physical or instrument
    ranges); leaving them unset warns.

    Models: ``model="linear"`` is Bayesian linear regression with a
    full-covariance Gaussian posterior over the weights and the intercept
    (the tilted distributions are exact); ``model="mlp"`` is a network with
    one hidden layer of ``hidden_units`` ReLU units and a factorized Gaussian
    posterior over its weights, the tilted moments computed by probabilistic
    backpropagation's moment propagation. The default ``model="auto"`` fits
    the network, with or without noise.

    What privacy costs: clipping a site whose norm exceeds ``clip_norm``
    tempers that row's likelihood, and the noise reaches what is released.
    With ``mean_update="sep"`` that is the natural parameters of every
    weight, which for the network at ``epsilon=1`` costs much accuracy
    except on large, low-dimensional data; the network's default under
    noise, ``mean_update="adam"``, releases the gradients of the means
    instead and loses much less. The measurements, against DP-SGD, are in
    the privacy guide.

    Parameters
    ----------
    model : {"auto", "linear", "mlp"}, default="auto"
        The regression model. "auto" is ``"mlp"``, with or without noise:
        under noise the network's weight means move by Adam on released
        gradients (``mean_update``), which predicted better than the private
        linear model on the UCI sets at ``epsilon`` 1 and 3 in all but one
        case (the privacy guide's measurements). ``"linear"`` gives coefficients
        (``coef_``) and an exact SEP update. The choice is in ``model_``.
    hidden_units : int, default=50
        Hidden ReLU units of the ``"mlp"`` model.
    epsilon : float, default=1.0
        Privacy budget of the whole fit, positive; ``float("inf")`` for no
        noise.
    delta : float, default=1e-5
        Privacy parameter delta in (0, 1); choose it well below ``1 /
        n_samples`` (a fit whose ``delta`` exceeds it warns with
        :class:`~skprivfact.exceptions.PrivacyLeakWarning`).
    clip_norm : float, "auto" or None, default="auto"
        Bound ``C`` on the Euclidean norm of each row's site natural
        parameters (and of the factor). None disables clipping, allowed only
        with ``epsilon=float("inf")``. "auto" is 1.0 under noise and None
        with ``epsilon=inf``, where clipping would only temper the likelihood
        of the rows it touches; the value used is in ``clip_norm_``. Like
        DP-SGD's clipping norm it trades the bias of clipping (rows with
        large residuals count for less) against the noise, whose std grows
        with ``C``: the best value depends on the data and on ``epsilon``
        (larger where the noise is smaller), so it is worth choosing on
        validation rows, as the step size is.
    damping : float or "auto", default="auto"
        SEP damping ``gamma`` in (0, 1]: each row in a batch replaces
        ``gamma / n_samples`` of the factor. "auto" is ``min(1, 4 /
        max_iter)`` under noise (both models; 0.1 at the 40 passes of
        ``max_iter="auto"``): the start's weight in the factor,
        ``exp(-damping * max_iter)``, falls to 2%, and the factor the sites
        are computed at averages the noise of about ``max_iter / 4`` passes'
        releases. Without noise it is 1 for ``"linear"`` (plain SEP,
        exact in one full-batch update) and ``min(1, 16 / batch_size)`` for
        ``"mlp"``: the
        rows of a batch all update from the same cavity, and beyond about 16
        such updates at full weight the network occasionally ran away on the
        UCI benchmarks, which damping 0.5 cured; a small damping there only
        slows the fit.
    batch_size : int, "auto" or None, default="auto"
        Expected batch size (Poisson sampling); None (or at least
        ``n_samples``) uses every row in every update. "auto" does so for
        ``"linear"`` (whose sites do not depend on the cavity); for ``"mlp"``
        it is ``n_samples // 256`` between 1 and 32 without noise, and
        ``n_samples // 32`` between 1 and 128 under noise (256 with
        ``mean_update="adam"``), where the small damping lets fewer, larger
        updates reach the same noise level in less time.
    max_iter : int or "auto", default="auto"
        Number of passes over the data; a pass is ``ceil(n_samples /
        batch_size)`` updates. The noise is calibrated for this many. "auto"
        is 40 under noise and for ``"linear"``; without noise the network
        gets ``ceil(200_000 / n_samples)`` passes between 40 and 400, since
        its factor moves by a few rows per update and small data sets need
        more passes to settle. The number used is in ``n_iter_``.
    averaging_fraction : float or "auto", default="auto"
        Fraction in (0, 1] of the last updates whose released factors are
        averaged into the returned posterior; averaging removes most of the
        privacy noise and of the batch-to-batch fluctuation. Small values
        return the last factor. With ``mean_update="adam"`` the fraction of
        the Adam updates whose means and precisions are averaged. "auto" is
        0.5 with ``mean_update="sep"`` and 0.05 with ``"adam"``, whose means
        are still descending late in the fit (with the constant
        ``learning_rate_schedule``, for which it was chosen), so that a long
        average lags behind them.
    mean_update : {"auto", "sep", "adam"}, default="auto"
        How the network's weight means move. "sep": every natural parameter
        follows the damped SEP update of released sites. "adam" (the network
        only; ``model="auto"`` then fits it): each update releases per row
        the gradient of the row's log-likelihood in the weight means next to
        its precision site, clipped together to ``clip_norm`` (where they
        are computed: ``adam_sites``); the precisions follow the damped SEP
        update and the means take one Adam step of size ``learning_rate``.
        The noise level is held fixed during these updates and, with
        ``noise_variance=None``, is then set from one more release: the
        mean squared residual of the fitted means over the training rows,
        clipped per row (see the privacy paragraph). Under noise the
        gradients of the means carry the noise once, where SEP's damped
        average of released shift sites carries it in every weight's
        precision-times-mean; :doc:`/dpsep_measurements` compares the two
        with DP-SGD. "auto" is "adam" for the network
        under noise and "sep" otherwise; the choice is in ``mean_update_``.
    learning_rate : float, default=0.03
        Adam's step size on the weight means (scaled units), with
        ``mean_update="adam"``; unused otherwise.
    learning_rate_schedule : {"constant", "linear"}, default="constant"
        How Adam's step size moves over its updates, with
        ``mean_update="adam"``: "constant" keeps ``learning_rate``; "linear"
        lowers it linearly from ``learning_rate`` at the first Adam update to
        ``learning_rate`` divided by their number at the last, so that the
        means settle where the noisy gradients average out instead of moving
        with them to the end; the best ``learning_rate`` differs between the
        two, so choose them together. Post-processing of the released
        gradients: the guarantee does not depend on it; unused otherwise.
    adam_sites : {"means", "cavity"}, default="means"
        Where each row's released vector is computed, with
        ``mean_update="adam"`` (unused otherwise). "means": at the weight
        means, the limit of the SEP sites as the weight variances vanish:
        the gradient of the row's Gaussian log-likelihood
        ``r / s2 * d mu / d w`` (``r`` the residual, ``s2`` the noise
        variance, ``mu`` the network's output at the means) next to the
        diagonal Gauss-Newton precision ``(d mu / d w)**2 / s2`` weighted by
        0.01, from the first update (no SEP warm-up). ``s2`` is the prior's
        noise variance (0.1 in the scaled units) or the fixed
        ``noise_variance``, the same in every fit, so that ``clip_norm``
        bounds ``r * d mu / d w`` at ``clip_norm * s2``; with the noise
        level learned, the precisions are rescaled at the end to the
        released noise variance. The moment match's log normalizer also
        rewards a smaller predictive variance, which slows the fit of
        targets with small residuals; at the means it does not. "cavity":
        the SEP sites, moment matches at the cavity, after a SEP warm-up
        over the first tenth of the updates (which also moves the noise
        level): the gradient of the row's log normalizer in the weight means
        (the shift site less the mean times the precision site) next to the
        precision site weighted by 0.1. The release, its clipping and its
        noise are the same for both; which predicts better depends on the
        data (:doc:`/dpsep_measurements` measures both).
    bounds_X : pair (lower, upper) or None, default=None
        Public bounds of the inputs, scalars or arrays of length
        ``n_features``; inputs are clipped to them and mapped to [-1, 1]. A
        clipped input warns, except a private fit's training rows: whether a
        record lies outside the bounds is not released. None standardizes with
        the training data's mean and standard deviation: the right choice with
        ``epsilon=inf`` (raw data need no preprocessing; nothing is released),
        and a leak under noise, where it issues a
        :class:`~skprivfact.exceptions.PrivacyLeakWarning`. Under noise the map
        comes from the bounds and, with ``scaling_share``, from a private
        estimate of the data's location and scale within them.
    bounds_y : pair (lower, upper) or None, default=None
        Public bounds of the target, likewise; predictive means are clipped
        to them.
    scaling_share : float or "auto", default="auto"
        Under noise, with ``bounds_X`` or ``bounds_y`` set: the share, in [0,
        1), of the budget spent on one release of the means and variances of
        the bounded columns (clipped to their bounds), counted in inverse
        noise variance as for ``DPLDA``'s ``totals_share``. Each column's map
        then sends its released mean plus or minus 2.5 released standard
        deviations (the variance inflated by twice its noise's standard
        deviation, so that the noise rarely makes the map narrower than the
        data) to [-1, 1], so that bounds much wider than the data do not
        crowd the scaled values; values are still clipped to the bounds only
        (a tail or a rare value may map beyond [-1, 1]), and where the noise
        swamps the estimate (few rows) the map stays that of the bounds. 0
        maps by the bounds alone. "auto" spends 0.1
        where the released means would carry noise of standard deviation at
        most 0.02 half-widths of the bounds (``sqrt(2 d)`` times the noise
        multiplier over ``n_samples``, ``d`` bounded columns), enough to
        narrow a map to half its bounds, and nothing otherwise: with few rows
        for the columns and epsilon the release could not narrow the maps and
        its budget is worth more to the fit. Unused without noise. With
        ``mean_update="adam"`` and ``noise_variance=None`` this release and
        the noise variance release (0.02) share one noise multiplier, so
        each takes half of ``scaling_share + 0.02`` (``scaling_share_``);
        that sum must stay below 1.
    prior_precision : float or "auto", default="auto"
        Precision of the zero-mean Gaussian prior of every weight (in the
        scaled units; the network divides each layer's input by the square
        root of its length). "auto" is fixed when ``epsilon`` is finite: 1
        for ``"mlp"`` and ``n_features + 1`` for ``"linear"`` (prior variance
        ``1 / (n_features + 1)`` per coefficient keeps the prior predictive
        spread of the scaled target about 1); without noise it starts at 1 and, after each pass, is set to its posterior
        mean under a Gamma(6, 6) hyperprior given the posterior of the
        weights (a variational update, as in probabilistic backpropagation).
        It is not learned under noise: the privacy noise in the released
        means would read as large weights and drive it towards zero.
    noise_variance : float or None, default=None
        Fixed variance of the observation noise, in the units of ``y``. None
        gives the noise precision a Gamma(2, 0.1) prior in the scaled units and
        infers it with the weights.
    accountant : {"rdp", "pld"}, default="rdp"
        The privacy accountant: Renyi DP, or privacy loss distributions
        (tight: less noise for the same claim; needs dp-accounting).
    budget : PrivacyBudget, default=None
        A budget shared across fits, copies and a whole ``GridSearchCV``,
        charged by every release; a fit that would exceed it is refused
        once the input is validated, before anything is released or charged.
    secure : bool, default=False
        Draw floating-point-safe noise: each release is rounded to a fine grid
        and gets exact discrete Gaussian noise from the operating system's
        cryptographic randomness (Mironov 2012 showed how textbook
        floating-point noise can leak). Needs full batches and
        ``accountant="rdp"``; slower (a pure-Python sampler).
    verbose : int or "bar", default=0
        Progress in the format of every skprivfact estimator, per pass: 1
        prints about ten lines, 2 one per pass (the epsilon spent so far,
        elapsed time and time left); "bar" draws a tqdm bar (the ``progress``
        extra).
    random_state : int, RandomState instance or None, default=None
        Seeds the network's initial means (not a release), and the batches of
        a fit without noise (``epsilon=inf``, no privacy); a private fit's
        batches and noise never come from it.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
        Posterior mean of the weights, in the original units (``"linear"``).
    intercept_ : float
        Posterior mean of the intercept, in the original units (``"linear"``).
    coef_covariance_ : ndarray of shape (n_features + 1, n_features + 1)
        Posterior covariance of ``(coef_, intercept_)``, intercept last, in the
        original units (``"linear"``).
    weights_mean_ : ndarray of shape (n_weights,)
        Posterior means of all weights in the scaled units: for ``"linear"``
        the coefficients then the intercept; for ``"mlp"`` the hidden layer's
        matrix row by row (bias last in each row), then the output weights
        (output bias last).
    weights_variance_ : ndarray of shape (n_weights,)
        Posterior variances of the same weights.
    prior_precision_ : float
        The prior precision used at the end (``prior_precision``, or the one
        learned under "auto").
    noise_variance_ : float
        Posterior mean of the observation-noise variance, in the units of
        ``y`` (``noise_variance`` when fixed).
    X_offset_, X_scale_ : ndarray of shape (n_features,)
        The map ``(X - X_offset_) / X_scale_`` to the scaled inputs (of
        inputs clipped to ``bounds_X`` when it is set): the bounds' map, or
        under noise with ``scaling_share`` the one from the released location
        and scale.
    y_offset_, y_scale_ : float
        The map of the target, likewise.
    scaling_share_ : float
        The share of the budget the location and scale release took (0 when
        there was none; see ``scaling_share``).
    noise_multiplier_ : float
        Noise std of each update relative to its sensitivity (0 without
        noise).
    model_ : str
        The model fitted, ``"linear"`` or ``"mlp"`` (``model``, or the one
        chosen under "auto").
    mean_update_ : str
        The update of the weight means used, ``"sep"`` or ``"adam"``
        (``mean_update``, or the one chosen under "auto").
    clip_norm_ : float or None
        The clipping bound used (``clip_norm``, or the one chosen under
        "auto").
    damping_ : float
        The damping used (``damping``, or the one chosen under "auto").
    sample_rate_ : float
        Poisson sampling rate of the batches.
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` spent, from the accountant (``(inf, delta)``
        without noise).
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
        Number of releases made: one per update, plus the location and scale
        release and the noise variance release when there are.
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`, when ``X`` has string
        column names.

    See Also
    --------
    sklearn.linear_model.BayesianRidge : Non-private Bayesian linear regression.
    sklearn.neural_network.MLPRegressor : Non-private, point-estimate network.

    References
    ----------
    M. Vinaroz and M. Park, "Differentially private stochastic expectation
    propagation", Transactions on Machine Learning Research, 2022.
    Y. Li, J. M. Hernandez-Lobato and R. E. Turner, "Stochastic expectation
    propagation", NeurIPS 2015.
    J. M. Hernandez-Lobato and R. P. Adams, "Probabilistic backpropagation for
    scalable learning of Bayesian neural networks", ICML 2015.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.sep import DPSEPRegressor
    >>> rng = np.random.RandomState(0)
    >>> X = rng.uniform(-1, 1, size=(5000, 2))
    >>> y = X @ [1.5, -0.5] + 0.1 * rng.normal(size=5000)
    >>> reg = DPSEPRegressor(epsilon=1.0, bounds_X=(-1, 1), bounds_y=(-3, 3),
    ...                      random_state=0).fit(X, y)
    >>> reg.predict(X[:2], return_std=True)[1].shape
    (2,)
    >>> reg.privacy_spent_[0] <= 1.0
    True
    """

    # The columns of transform.
    _output_names = ("predictive_mean", "predictive_std")

    _parameter_constraints: dict = {
        **CentralPrivacyEstimator._parameter_constraints,
        "model": [StrOptions({"auto", "linear", "mlp"})],
        "hidden_units": [Interval(Integral, 1, None, closed="left")],
        "clip_norm": [
            Interval(Real, 0, None, closed="neither"),
            StrOptions({"auto"}),
            None,
        ],
        "damping": [Interval(Real, 0, 1, closed="right"), StrOptions({"auto"})],
        "batch_size": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"}), None],
        "scaling_share": [Interval(Real, 0, 1, closed="left"), StrOptions({"auto"})],
        "max_iter": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "averaging_fraction": [Interval(Real, 0, 1, closed="right"), StrOptions({"auto"})],
        "mean_update": [StrOptions({"auto", "sep", "adam"})],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "learning_rate_schedule": [StrOptions({"constant", "linear"})],
        "adam_sites": [StrOptions({"means", "cavity"})],
        # (Not any array-like: a DataFrame or a dict would unpack its labels.)
        "bounds_X": [tuple, list, np.ndarray, None],
        "bounds_y": [tuple, list, np.ndarray, None],
        "prior_precision": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "noise_variance": [Interval(Real, 0, None, closed="neither"), None],
        "verbose": ["verbose", StrOptions({"bar"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        *,
        model="auto",
        hidden_units=50,
        epsilon=1.0,
        delta=1e-5,
        clip_norm="auto",
        damping="auto",
        batch_size="auto",
        max_iter="auto",
        averaging_fraction="auto",
        mean_update="auto",
        learning_rate=0.03,
        learning_rate_schedule="constant",
        adam_sites="means",
        bounds_X=None,
        bounds_y=None,
        scaling_share="auto",
        prior_precision="auto",
        noise_variance=None,
        accountant="rdp",
        budget=None,
        secure=False,
        verbose=0,
        random_state=None,
    ):
        self.model = model
        self.hidden_units = hidden_units
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.damping = damping
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.averaging_fraction = averaging_fraction
        self.mean_update = mean_update
        self.learning_rate = learning_rate
        self.learning_rate_schedule = learning_rate_schedule
        self.adam_sites = adam_sites
        self.bounds_X = bounds_X
        self.bounds_y = bounds_y
        self.scaling_share = scaling_share
        self.prior_precision = prior_precision
        self.noise_variance = noise_variance
        self.accountant = accountant
        self.budget = budget
        self.secure = secure
        self.verbose = verbose
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, **fit_params):
        """Fit the (private) SEP posterior.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs (dense, finite).
        y : array-like of shape (n_samples,)
            Training targets (finite).
        **fit_params : dict
            None accepted: ``sample_weight`` raises a TypeError saying why.

        Returns
        -------
        self : DPSEPRegressor
            The fitted estimator.
        """
        self._refuse_fit_params(fit_params)
        X, y = validate_input(self, X, y, dtype=np.float64, y_numeric=True)
        X = np.asarray(X, dtype=np.float64)
        # (y of strings passes validate_data as it is: converted here.)
        y = as_float64(y, "y")
        n_samples = X.shape[0]
        if n_samples < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least 2 samples; got n_samples = "
                f"{n_samples}."
            )
        private = self._is_private
        model_name = self.model
        if model_name == "auto":
            # The network, with or without noise: under noise its weight means
            # move by Adam on released gradients, which beat the linear model
            # on validation rows of the UCI sets at epsilon 1 and 3 in all but
            # one case, yacht at epsilon 3 (benchmarks/bench_sep.py
            # default-model).
            model_name = "mlp"
        if self.mean_update == "adam" and model_name == "linear":
            raise ValueError(
                'mean_update="adam" updates the network\'s weight means; the linear '
                'model\'s SEP update is exact. Use model="mlp" or mean_update="sep".'
            )
        mean_update = self.mean_update
        if mean_update == "auto":
            # Under noise SEP's damped average of released shift sites puts
            # the noise in every weight's mean; without it SEP is the
            # reference algorithm.
            mean_update = "adam" if private and model_name == "mlp" else "sep"
        adam = mean_update == "adam"
        averaging_fraction = self.averaging_fraction
        if averaging_fraction == "auto":
            averaging_fraction = _AUTO_ADAM_AVERAGING if adam else _AUTO_SEP_AVERAGING
        release_noise_variance = adam and self.noise_variance is None
        clip_norm = self.clip_norm
        if clip_norm == "auto":
            # Without noise nothing is released: clipping would only temper
            # the likelihood of the rows it touches.
            clip_norm = 1.0 if private else None
        if clip_norm is None and private:
            raise ValueError(
                "clip_norm=None (no clipping) is only allowed with epsilon=inf: the "
                "noise is calibrated to the clipped sites' norm."
            )
        batch_size = self.batch_size
        if batch_size is None:
            batch_size = n_samples
        elif batch_size == "auto":
            if model_name == "linear":
                batch_size = n_samples
            elif private:
                batch_size = min(
                    _AUTO_PRIVATE_ADAM_BATCH_SIZE if adam else _AUTO_PRIVATE_MLP_BATCH_SIZE,
                    max(1, n_samples // _AUTO_PRIVATE_MLP_ROWS_PER_UPDATE),
                )
            else:
                batch_size = min(
                    _AUTO_MLP_BATCH_SIZE, max(1, n_samples // _AUTO_MLP_ROWS_PER_UPDATE)
                )
        n_passes = self.max_iter
        if n_passes == "auto":
            n_passes = _AUTO_PASSES
            if model_name == "mlp" and not private:
                n_passes = min(
                    _AUTO_MLP_MAX_PASSES,
                    max(_AUTO_PASSES, math.ceil(_AUTO_MLP_ROW_UPDATES / n_samples)),
                )
        if self.damping != "auto":
            damping = float(self.damping)
        elif private:
            damping = min(1.0, _AUTO_PRIVATE_DAMPING_PASSES / n_passes)
        elif model_name == "mlp":
            damping = min(1.0, _AUTO_MLP_FULL_DAMPING_ROWS / batch_size)
        else:
            damping = 1.0
        # Bad bounds are refused before the budget is charged.
        for bounds, name, n_columns in (
            (self.bounds_X, "bounds_X", X.shape[1]),
            (self.bounds_y, "bounds_y", 1),
        ):
            if bounds is not None:
                _check_bounds(bounds, n_columns, name)
        scaling_share = 0.0
        if private:
            n_bounded = (X.shape[1] if self.bounds_X is not None else 0) + (
                self.bounds_y is not None
            )
            scaling_share = self._scaling_share(n_samples, n_bounded)
        refine_scaling = scaling_share > 0
        # The preliminary releases (the scaling's, the noise variance's) share
        # one multiplier: together they take the sum of their shares.
        preliminary_share = scaling_share + _NOISE_VARIANCE_SHARE * release_noise_variance
        if preliminary_share >= 1:
            raise ValueError(
                f"scaling_share={scaling_share!r} leaves no budget for the updates: with "
                'mean_update="adam" and the noise level learned, scaling_share plus the '
                f"noise variance release's {_NOISE_VARIANCE_SHARE} must be below 1."
            )
        # Planned (and reserved against the budget) before anything is computed
        # from the data.
        engine = self._start_privacy(
            n_samples,
            batch_size,
            n_passes=n_passes,
            n_preliminary_releases=int(refine_scaling) + int(release_noise_variance),
            preliminary_share=preliminary_share if preliminary_share > 0 else 0.5,
        )
        self.damping_ = damping
        # Preliminary releases share one multiplier, so each takes an equal part.
        self.scaling_share_ = (
            preliminary_share / (1 + release_noise_variance) if refine_scaling else 0.0
        )
        self.model_ = model_name
        self.mean_update_ = mean_update
        self.clip_norm_ = clip_norm
        X_offset, X_scale, X_box = _scaling(X, self.bounds_X, "bounds_X", private, "X")
        X_scale = np.where(X_scale > 0, X_scale, 1.0)
        y_offset, y_scale, y_box = _scaling(y[:, None], self.bounds_y, "bounds_y", private, "y")
        # A constant target (a small cross-validation fold, say) is only centred.
        y_scale = np.where(y_scale > 0, y_scale, 1.0)
        if refine_scaling:
            blocks = {}
            if X_box is not None:
                blocks["X"] = (X, X_offset, X_scale, X_box)
            if y_box is not None:
                blocks["y"] = (y[:, None], y_offset, y_scale, y_box)
            maps = dict(zip(blocks, _released_location_scale(list(blocks.values()), engine)))
            X_offset, X_scale = maps.get("X", (X_offset, X_scale))
            y_offset, y_scale = maps.get("y", (y_offset, y_scale))
        self.X_offset_, self.X_scale_, self._X_box = X_offset, X_scale, X_box
        self._y_box = y_box
        self.y_offset_, self.y_scale_ = float(y_offset[0]), float(y_scale[0])
        X_scaled = _apply_scaling(X, X_offset, X_scale, X_box, "bounds_X", warn=not private)
        y_scaled = _apply_scaling(
            y[:, None], y_offset, y_scale, y_box, "bounds_y", warn=not private
        )[:, 0]

        noise_variance = (
            None if self.noise_variance is None else self.noise_variance / self.y_scale_**2
        )
        y_range = None
        if y_box is not None:
            # bounds_y in scaled units, where predict clips the predictive mean.
            y_range = (np.array([y_box[0][0], y_box[1][0]]) - self.y_offset_) / self.y_scale_
        # Under noise the released means carry the privacy noise, which would
        # read as large weights and drive a learned prior precision to zero.
        learn_prior = self.prior_precision == "auto" and not private
        if self.prior_precision != "auto":
            prior_precision = float(self.prior_precision)
        elif private and model_name == "linear":
            # Inputs and target lie in [-1, 1]: a prior variance of
            # 1 / (n_features + 1) per coefficient keeps the prior predictive
            # spread of the target about 1, so that the empirical-Bayes
            # shrinkage of noisy means pulls towards predictions inside the
            # bounds rather than anywhere in [-n_features, n_features].
            prior_precision = float(X.shape[1] + 1)
        else:
            # Under Adam the prior's pull also bounds the random walk the
            # noise drives the means on, but naval's fit needs large
            # weights: its validation RMSE at epsilon 1 (adam_sites="means",
            # clip_norm=3, step 0.3, linear, 100 passes, 6 fits each) was
            # 0.0047 and 0.0063 in two runs at 1, 0.0060 at 0.1, 0.0077 at
            # 10 and 0.0143 at 100 (predicting the mean: 0.0145).
            prior_precision = 1.0
        if model_name == "linear":
            model = _LinearModel(X.shape[1], prior_precision, noise_variance)
        else:
            model = _NetworkModel(X.shape[1], self.hidden_units, prior_precision, noise_variance)
        factor, self._posterior_noise = _fit_sep(
            model,
            X_scaled,
            y_scaled,
            damping=self.damping_,
            clip_norm=clip_norm,
            engine=engine,
            n_passes=n_passes,
            averaging_fraction=averaging_fraction,
            learn_prior=learn_prior,
            random_state=check_random_state(self.random_state),
            progress=self._make_progress(n_passes),
            mean_update=mean_update,
            learning_rate=self.learning_rate,
            learning_rate_schedule=self.learning_rate_schedule,
            adam_sites=self.adam_sites,
            release_noise_variance=release_noise_variance,
            y_range=y_range,
        )
        self.n_iter_ = n_passes
        self.prior_precision_ = float(model.prior_precision)
        self._model = model
        self._posterior = model.prior() + n_samples * factor
        if model_name == "mlp":
            mean, variance, shape, rate = model.moments(self._posterior, self._posterior_noise)
        else:
            mean, covariance, shape, rate = model.moments(
                self._posterior, self._posterior_noise
            )
            variance = np.diag(covariance).copy()
            # y = y_offset + y_scale (w . (x - X_offset) / X_scale + b).
            transform = np.zeros((X.shape[1] + 1, X.shape[1] + 1))
            transform[: X.shape[1], : X.shape[1]] = np.diag(self.y_scale_ / X_scale)
            transform[X.shape[1], : X.shape[1]] = -self.y_scale_ * X_offset / X_scale
            transform[X.shape[1], X.shape[1]] = self.y_scale_
            original = transform @ mean
            self.coef_ = original[:-1]
            self.intercept_ = float(original[-1] + self.y_offset_)
            self.coef_covariance_ = transform @ covariance @ transform.T
        self.weights_mean_ = mean
        self.weights_variance_ = variance
        self.noise_variance_ = float(model.noise_var(shape, rate) * self.y_scale_**2)
        return self

    def _scaled_moments(self, X, warn=True):
        check_is_fitted(self)
        X = validate_input(self, X, dtype=np.float64, reset=False)
        X_scaled = _apply_scaling(
            np.asarray(X, dtype=np.float64),
            self.X_offset_,
            self.X_scale_,
            self._X_box,
            "bounds_X",
            warn=warn,
        )
        return self._model.predict_moments(self._posterior, X_scaled, self._posterior_noise)

    def predict(self, X, return_std=False):
        """Posterior predictive mean (and standard deviation) of the target.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs; clipped to ``bounds_X`` when it is set.
        return_std : bool, default=False
            Whether to return the predictive standard deviation too (weight
            uncertainty plus observation noise).

        Returns
        -------
        y_mean : ndarray of shape (n_samples,)
            Predictive means, in the units of ``y``.
        y_std : ndarray of shape (n_samples,)
            Predictive standard deviations; only with ``return_std=True``.
        """
        return self._predict(X, return_std)

    def _predict(self, X, return_std, warn=True):
        mean, variance, noise_var = self._scaled_moments(X, warn=warn)
        y_mean = self.y_offset_ + self.y_scale_ * mean
        if self._y_box is not None:
            # The target is known to lie in bounds_y (public): so does its
            # predictive mean (post-processing).
            y_mean = np.clip(y_mean, self._y_box[0][0], self._y_box[1][0])
        if not return_std:
            return y_mean
        return y_mean, self.y_scale_ * np.sqrt(variance + noise_var)

    def transform(self, X):
        """Predictive mean and standard deviation as two columns.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Inputs.

        Returns
        -------
        moments : ndarray of shape (n_samples, 2)
            Column 0 the predictive mean, column 1 the predictive standard
            deviation, in the units of ``y``.
        """
        return np.column_stack(self.predict(X, return_std=True))

    def _scaling_share(self, n_samples, n_bounded):
        """The share of the budget the location and scale release takes (0:
        none), from public quantities only."""
        if n_bounded == 0:
            return 0.0
        if self.scaling_share != "auto":
            return float(self.scaling_share)
        noise_multiplier = calibrate_noise_multiplier(
            self.epsilon,
            self.delta,
            accountant=self.accountant,
            neighbouring_relation="substitution",
        ) / math.sqrt(_AUTO_SCALING_SHARE)
        mean_noise = noise_multiplier * math.sqrt(2 * n_bounded) / n_samples
        return _AUTO_SCALING_SHARE if mean_noise <= _AUTO_SCALING_MAX_NOISE else 0.0

    def fit_transform(self, X, y=None, **fit_params):
        """Fit to ``(X, y)``, then :meth:`transform` ``X``.

        In a private fit, rows of ``X`` beyond ``bounds_X`` are clipped
        without the warning :meth:`transform` gives: whether a training row
        lies beyond the bounds is not released.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training inputs.
        y : array-like of shape (n_samples,)
            Training targets.
        **fit_params : dict
            None accepted (see :meth:`fit`).

        Returns
        -------
        moments : ndarray of shape (n_samples, 2)
            As :meth:`transform` gives them.
        """
        self.fit(X, y, **fit_params)
        return np.column_stack(self._predict(X, return_std=True, warn=not self._is_private))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Noise and clipping cost accuracy on the small data sets of generic checks.
        tags.regressor_tags.poor_score = not (
            isinstance(self.epsilon, Real) and math.isinf(self.epsilon)
        )
        return tags
