"""Differentially private Bayesian logistic regression (VIPS, Polya-Gamma VB)."""

import functools
import math
import warnings
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from scipy import linalg, special
from scipy.linalg import lapack
from sklearn.base import ClassifierMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import ThreadpoolController

from ._logistic_kernels import (
    count_nonzero_and_squared_norms,
    dense_to_csr,
    root_omega_rows,
    root_omega_scale,
    sparse_polya_gamma_gram,
)
from .base import CentralPrivacyEstimator, NamedOutputMixin
from .exceptions import PrivacyLeakWarning
from .mechanisms import _clip_rows_inplace, clip_rows
from .utils._validation import check_positive_bound, validate_input

__all__ = ["DPBayesLogReg"]

# Largest mean of a Polya-Gamma(1, c) variable, attained at c = 0; it bounds
# each record's second-moment contribution.
_MAX_EXPECTED_OMEGA = 0.25
# The released second moment is of the order of data_norm**2, which must stay
# well inside float32 (3.4e38, and above its smallest normal 1.2e-38), in
# which the fast products and eigendecomposition run.
_MIN_DATA_NORM = 1e-18
_MAX_DATA_NORM = 1e18
# Beyond it the float32 eigendecomposition's cast would overflow.
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# Below this |c| the series tanh(c/2)/(2c) = 1/4 - c^2/48 + ... is used: the
# ratio itself loses digits to cancellation near 0.
_SMALL_LOGIT_SCALE = 1e-4
# The averaged second moment is floored at this many times the typical
# spectral radius of the noise it holds, sqrt(n_weights) times its entry std
# (half the edge of the semicircle law): directions the noise could have
# created are not trusted beyond it.
_NOISE_FLOOR_FACTOR = 1.0
# With an intercept, the constant feature takes this fraction of data_norm and
# the features the rest of the norm budget, sqrt(1 - 0.5**2) = 0.87: the
# intercept's statistics are large anyway (every row contributes), and the
# features keep three quarters of their second-moment signal.
_INTERCEPT_SHARE = 0.5
# Step exponent of the second-moment average under noise or subsampling: a
# compromise between following the posterior and averaging noise away.
_AUTO_LEARNING_DECAY = 0.8
# Gauss-Hermite rule for E[sigmoid(m + s * eps)] when s is at most
# _QUADRATURE_SWITCH_STD: the integrand is analytic in a strip of half-width
# pi / (sqrt(2) s) >= 2.2, where 48 nodes are accurate to about 1e-12.
_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite.hermgauss(48)
_LOG_HERMITE_WEIGHTS = np.log(_HERMITE_WEIGHTS) - 0.5 * math.log(math.pi)
_QUADRATURE_SWITCH_STD = 1.0
# For larger s, E[sigmoid(T)] = int sigmoid'(t) Phi((m - t) / s) dt by parts;
# sigmoid' decays like exp(-|t|) and is analytic in |Im t| < pi, so the
# trapezoid rule on this grid is exact to about exp(-2 pi^2 / h) and the
# tails beyond |t| = 60 hold less than exp(-60) of the mass.
_TRAPEZOID_STEP = 0.25
_TRAPEZOID_GRID = np.arange(-60.0, 60.0 + _TRAPEZOID_STEP / 2, _TRAPEZOID_STEP)
_LOG_TRAPEZOID_WEIGHTS = (
    math.log(_TRAPEZOID_STEP)
    + special.log_expit(_TRAPEZOID_GRID)
    + special.log_expit(-_TRAPEZOID_GRID)
)
# The averaged second moment is eigendecomposed in float32 when its norm
# times float32's unit roundoff is at most this share of the noise floor.
_FLOAT32_ROUNDING = float(np.finfo(np.float32).eps) / 2.0
_EIGH_FLOAT32_SHARE = 1e-3
# Design rows with at most this fraction of non-zero entries (each row decided
# on its own, see _EStep) take the sparse
# E-step kernel (nnz^2 operations per row) instead of dense BLAS products.
_SPARSE_DENSITY = 0.2
# Rows per chunk in the quadrature, to bound memory (rows x 481 floats).
_PREDICT_CHUNK = 4096


@functools.cache
def _blas_controller():
    """The process's BLAS libraries, found once (a search reads /proc, ~5 ms)."""
    return ThreadpoolController()


def _expected_polya_gamma(logit_scale):
    """Mean of the Polya-Gamma(1, c) distribution, ``tanh(c / 2) / (2 c)``.

    Parameters
    ----------
    logit_scale : array-like
        The tilting parameters ``c`` (the root of the expected squared logit).

    Returns
    -------
    mean : ndarray
        ``E[omega]``, in [0, 1/4]; 1/4 at ``c = 0`` and at a NaN ``c``. Never
        above 1/4, even after rounding: each record's contribution bound rests
        on it.
    """
    c = np.abs(np.asarray(logit_scale, dtype=np.float64))
    small = c < _SMALL_LOGIT_SCALE
    safe = np.where(small, 1.0, c)
    mean = np.where(small, 0.25 - c * c / 48.0, np.tanh(safe / 2.0) / (2.0 * safe))
    # fmin: a NaN c (from a product that overflowed) gets 1/4, as in the
    # numba kernels, so the bound holds and the sums stay finite.
    return np.fmin(mean, _MAX_EXPECTED_OMEGA)


def _warn_if_clipped(X, data_norm):
    """Warn that rows of ``X`` longer than ``data_norm`` are clipped to it.

    Not for a private fit's training rows: whether one of them lies outside
    the bound is not released.
    """
    with np.errstate(over="ignore"):
        longest = np.max(np.einsum("ij,ij->i", X, X)) if X.size else 0.0
    if longest > data_norm**2 * (1.0 + 1e-12):
        warnings.warn(
            f"Some rows of X have a Euclidean norm above data_norm = {data_norm:g}; "
            "they were clipped to it.",
            UserWarning,
        )


def _design_rows(X, data_norm, fit_intercept):
    """Rows as the model sees them, each of Euclidean norm <= ``data_norm``.

    ``X`` is clipped to ``data_norm``. With an intercept, the row
    ``[x * sqrt(3) / 2, data_norm / 2]`` carries the constant feature inside
    the same norm bound (the second clip only absorbs rounding).
    """
    if not fit_intercept:
        return clip_rows(X, data_norm)
    data_norm = check_positive_bound(data_norm, "max_norm")
    X = np.asarray(X, dtype=np.float64)
    if not np.all(np.isfinite(X)):
        raise ValueError("X must not contain NaN or infinity.")
    n_samples, n_features = X.shape
    feature_scale, constant = _intercept_split(data_norm)
    # clip_rows(X, data_norm) * feature_scale, as the scaled features
    # clipped to data_norm * feature_scale, written into the design rows'
    # columns in place: one pass instead of copies.
    rows = np.empty((n_samples, n_features + 1))
    features = rows[:, :n_features]
    if data_norm * feature_scale >= np.finfo(np.float64).tiny:
        np.multiply(X, feature_scale, out=features)
        _clip_rows_inplace(features, data_norm * feature_scale)
    else:  # the product would lose digits: clip, then scale
        features[...] = X
        _clip_rows_inplace(features, data_norm)
        features *= feature_scale
    rows[:, n_features] = constant
    return _clip_rows_inplace(rows, data_norm)


def _intercept_split(data_norm):
    """Scale of the features and value of the constant feature."""
    return math.sqrt(1.0 - _INTERCEPT_SHARE**2), _INTERCEPT_SHARE * data_norm


def _coef_scaling(n_features, data_norm, fit_intercept):
    """Diagonal map from the model's weights to ``(coef, intercept)``."""
    if not fit_intercept:
        return np.ones(n_features)
    feature_scale, constant = _intercept_split(data_norm)
    scaling = np.full(n_features + 1, feature_scale)
    scaling[-1] = constant
    return scaling


def _expected_sufficient_statistics(rows, labels, second_moment, work=None):
    """E-step and the two statistics of one batch, summed over its records.

    Parameters
    ----------
    rows : ndarray of shape (n_batch, n_weights)
        The batch's design rows, each of norm <= data_norm.
    labels : ndarray of shape (n_batch,)
        Labels in {0, 1}.
    second_moment : ndarray of shape (n_weights, n_weights)
        ``E[w w']`` under the current posterior.
    work : ndarray of shape (n_batch, n_weights), default=None
        Scratch space, reused across iterations to spare large allocations.

    Returns
    -------
    first_moment_sum : ndarray of shape (n_weights,)
        ``sum_n (y_n - 1/2) x_n``: each record adds a vector of norm
        <= data_norm / 2.
    second_moment_sum : ndarray of shape (n_weights, n_weights)
        ``sum_n E[omega_n] x_n x_n'``: each record adds a matrix of Frobenius
        norm ``E[omega_n] ||x_n||^2 <= data_norm^2 / 4``.
    """
    if work is None:
        work = np.empty_like(rows)
    np.matmul(rows, second_moment, out=work)
    squared_logit_scale = np.einsum("ij,ij->i", work, rows)
    first_moment_sum = (labels - 0.5) @ rows
    return first_moment_sum, _weighted_gram(rows, squared_logit_scale, work)


def _weighted_gram(rows, squared_logit_scale, work):
    """``sum_n E[omega_n] x_n x_n'`` in float64, ``E[omega_n]`` from ``c_n^2``.

    Whatever ``squared_logit_scale`` holds (it may come from a float32
    product), ``E[omega_n]`` is in [0, 1/4], so each record adds at most
    ``||x_n||^2 / 4`` in Frobenius norm: only the weights depend on it.
    """
    omega = _expected_polya_gamma(np.sqrt(np.maximum(squared_logit_scale, 0.0)))
    # sum_n omega_n x_n x_n' as the symmetric rank-k update of the rows scaled
    # by sqrt(omega_n): numpy computes A' A with syrk (half the flops of a
    # general product) and mirrors the triangle, so it is exactly symmetric.
    np.multiply(rows, np.sqrt(omega)[:, np.newaxis], out=work)
    return work.T @ work


class _EStep:
    """The E-step over fixed design rows, with what does not change precomputed.

    Each row takes one of two paths, chosen from that row alone (never from
    the rest of the data set, so that a record's weight ``E[omega_n]`` is
    the same function of its row and the released posterior whichever
    records surround it: a data-wide choice would let one added record move
    every other record's weight). Rows with at most ``_SPARSE_DENSITY`` of
    their entries non-zero go through a numba kernel that costs ``nnz^2``
    per row; the other rows through BLAS, with ``x_n' E[w w'] x_n`` (which
    only sets the weights, never the bound of a record's contribution) as a
    float32 product when ``float32`` (its relative error, about 1e-7, is far
    below the noise of a private fit; it is a matrix product for every batch,
    one row included, so that each row is rounded alike; a row whose float32
    value overflows gets its own float64 value) and the released sum in
    float64. In full batch the first-moment statistic, which does not depend
    on the posterior, is computed once.
    """

    def __init__(self, rows, labels, *, float32=True):
        self.rows = rows
        self.labels = labels
        self.float32 = float32
        self.first_moment_sum = (labels - 0.5) @ rows
        _, squared_norms = count_nonzero_and_squared_norms(rows)
        n_weights = rows.shape[1]
        self.sparse_row = np.count_nonzero(rows, axis=1) <= _SPARSE_DENSITY * n_weights
        # Each row's position within its path's rows, to map Poisson batches.
        self.position = np.empty(rows.shape[0], dtype=np.intp)
        self.position[self.sparse_row] = np.arange(np.count_nonzero(self.sparse_row))
        self.position[~self.sparse_row] = np.arange(np.count_nonzero(~self.sparse_row))
        self.sparse = None
        if self.sparse_row.any():
            indptr, indices, values = dense_to_csr(
                rows if self.sparse_row.all() else rows[self.sparse_row]
            )
            self.sparse = sp.csr_matrix(
                (values, indices, indptr), shape=(indptr.size - 1, n_weights)
            )
        self.dense_rows = self.dense_norms = None
        if not self.sparse_row.all():
            dense = slice(None) if not self.sparse_row.any() else ~self.sparse_row
            self.dense_rows = rows[dense]
            self.dense_norms = squared_norms[dense]
        # Full-batch buffers of the dense path, made on the first full-batch
        # call (Poisson batches make their own, of the batch's size).
        self.work = self.rows32 = self.product32 = None

    def __call__(self, second_moment, *, batch=None, isotropic=False):
        """The two statistics of the rows (or of ``batch``, an index array).

        ``isotropic`` says that ``second_moment`` is a multiple of the
        identity (the first iteration), so ``x' E[w w'] x`` is a scaled
        squared norm.
        """
        if batch is None:
            first_moment_sum = self.first_moment_sum
        else:
            first_moment_sum = (self.labels[batch] - 0.5) @ self.rows[batch]
        n_weights = self.rows.shape[1]
        second_moment_sum = np.zeros((n_weights, n_weights))
        if self.sparse is not None:
            csr = self.sparse
            if batch is not None:
                csr = csr[self.position[batch[self.sparse_row[batch]]]]
            sparse_polya_gamma_gram(
                csr.indptr,
                csr.indices,
                csr.data,
                np.ascontiguousarray(second_moment),
                second_moment_sum,
            )
        if self.dense_rows is not None:
            if batch is None:
                dense_batch = None
            else:
                dense_batch = self.position[batch[~self.sparse_row[batch]]]
            second_moment_sum += self._dense_gram(
                second_moment, dense_batch, isotropic
            )
        return first_moment_sum, second_moment_sum

    def _dense_gram(self, second_moment, batch, isotropic):
        """``sum_n E[omega_n] x_n x_n'`` over the dense-path rows (or ``batch`` of them)."""
        rows = self.dense_rows if batch is None else self.dense_rows[batch]
        if batch is None and self.work is None:
            self.work = np.empty_like(rows)
            if self.float32:
                self.rows32 = rows.astype(np.float32)
                self.product32 = np.empty_like(self.rows32)
        work = self.work if batch is None else np.empty_like(rows)
        if isotropic:
            norms = self.dense_norms if batch is None else self.dense_norms[batch]
            root_omega_scale(second_moment[0, 0] * norms, rows, work)
            return work.T @ work
        if not self.float32:
            np.matmul(rows, second_moment, out=work)
            squared_logit_scale = np.einsum("ij,ij->i", work, rows)
            return _weighted_gram(rows, squared_logit_scale, work)
        rows32 = self.rows32 if batch is None else rows.astype(np.float32)
        # A row whose float32 value overflows (inf or NaN) is redone in
        # float64 by root_omega_rows, alone.
        with np.errstate(over="ignore", invalid="ignore"):
            if rows32.shape[0] == 1:
                # A one-row product would go to another BLAS routine (a
                # matrix-vector one), which rounds differently: with a zero
                # row it is the same product as in a larger batch.
                padded = np.vstack([rows32, np.zeros_like(rows32)])
                product = (padded @ second_moment.astype(np.float32))[:1]
            else:
                product = np.matmul(
                    rows32,
                    second_moment.astype(np.float32),
                    out=self.product32 if batch is None else None,
                )
        root_omega_rows(product, rows32, rows, second_moment, work)
        return work.T @ work


def _gaussian_posterior(precision, shift):
    """Covariance and mean of N(precision^-1 shift, precision^-1)."""
    factor = linalg.cho_factor(precision, lower=True)
    covariance = linalg.cho_solve(factor, np.eye(precision.shape[0]))
    covariance = (covariance + covariance.T) / 2.0
    return covariance, linalg.cho_solve(factor, shift)


def _floored_posterior(second_total, floor, expected_precision, first_total):
    """q(w) from the averaged second moment, its eigenvalues floored at ``floor``.

    ``second_total`` is exactly symmetric (an average of symmetric releases).

    The precision is ``E[a] I + project_psd(second_total, floor)``. A Cholesky
    factorisation of ``second_total - floor I`` settles the common case of
    nothing to project; otherwise one eigendecomposition gives both the
    projection and the inverse of the precision.

    Returns
    -------
    covariance : ndarray of shape (n_weights, n_weights)
    mean : ndarray of shape (n_weights,)
    projected : callable
        Returns the projected second moment (computed only when called).
    """
    n_weights = second_total.shape[0]
    try:
        np.linalg.cholesky(second_total - floor * np.eye(n_weights))
    except np.linalg.LinAlgError:
        pass
    else:
        covariance, mean = _gaussian_posterior(
            expected_precision * np.eye(n_weights) + second_total, first_total
        )
        return covariance, mean, lambda: second_total
    if (
        _FLOAT32_ROUNDING * np.linalg.norm(second_total) <= _EIGH_FLOAT32_SHARE * floor
        and np.abs(second_total).max() < _FLOAT32_MAX
    ):
        # Rounding to float32 moves eigenvalues by far less than the floor
        # that the noise sets (and LAPACK's float32 solver is faster).
        values, vectors, info = lapack.ssyevd(second_total.astype(np.float32))
        if info != 0:
            values, vectors = np.linalg.eigh(second_total)
    else:
        values, vectors = np.linalg.eigh(second_total)
    values, vectors = values.astype(np.float64), vectors.astype(np.float64)
    floored = np.maximum(values, floor)
    # B B' with B = V diag(precision eigenvalues)^-1/2: numpy's syrk, so the
    # covariance is exactly symmetric.
    factor = vectors / np.sqrt(expected_precision + floored)
    covariance = factor @ factor.T
    return covariance, covariance @ first_total, lambda: (vectors * floored) @ vectors.T


def _released_objective(
    first_moment_total,
    second_moment_total,
    mean,
    covariance,
    shape,
    rate,
    prior_shape,
    prior_rate,
):
    """The ELBO computable from the released statistics.

    The expected log-likelihood's terms linear and quadratic in the weights,
    from the noisy statistics, plus the prior terms and the entropies of q(w)
    and q(a). The Polya-Gamma normalisers, one per record, are not released
    and are left out, so this is the ELBO up to terms that depend on the
    records only through the current posterior. It is printed, never used.
    """
    n_weights = mean.shape[0]
    second_moment = covariance + np.outer(mean, mean)
    expected_precision = shape / rate
    expected_log_precision = special.digamma(shape) - math.log(rate)
    log_likelihood = first_moment_total @ mean - 0.5 * np.sum(
        second_moment_total * second_moment
    )
    log_prior_weights = 0.5 * n_weights * (
        expected_log_precision - math.log(2.0 * math.pi)
    ) - 0.5 * expected_precision * np.trace(second_moment)
    log_prior_precision = (
        prior_shape * math.log(prior_rate)
        - special.gammaln(prior_shape)
        + (prior_shape - 1.0) * expected_log_precision
        - prior_rate * expected_precision
    )
    entropy_weights = 0.5 * np.linalg.slogdet(2.0 * math.pi * math.e * covariance)[1]
    entropy_precision = (
        shape
        - math.log(rate)
        + special.gammaln(shape)
        + (1.0 - shape) * special.digamma(shape)
    )
    return float(
        log_likelihood
        + log_prior_weights
        + log_prior_precision
        + entropy_weights
        + entropy_precision
    )


def _fit_vips(
    rows,
    labels,
    *,
    data_norm,
    engine,
    n_iter,
    prior_shape,
    prior_rate,
    learning_decay,
    learning_offset,
    progress,
):
    """Private variational Bayes for logistic regression (Park et al., Alg. 5).

    Each of the ``n_iter`` iterations has ``engine`` draw a Poisson batch,
    computes the two expected sufficient statistics of its records and
    releases them together as one Gaussian mechanism (one accountant step). The releases
    enter running averages (uniform for the first moment, step
    ``(learning_offset + t) ** -learning_decay`` for the second), from which
    q(w) is computed, and q(a) follows.

    Returns
    -------
    mean : ndarray of shape (n_weights,)
    covariance : ndarray of shape (n_weights, n_weights)
    shape, rate : float
        The Gamma posterior of the weight precision ``a``.
    n_iter : int
    """
    n_samples, n_weights = rows.shape
    sample_rate = engine.plan.sample_rate
    sensitivities = [data_norm / 2.0, _MAX_EXPECTED_OMEGA * data_norm**2]
    # Noise std of each entry of one release of the second-moment total.
    second_noise_std = engine.noise_scales(sensitivities)[1] / sample_rate
    identity = np.eye(n_weights)

    shape = prior_shape + n_weights / 2.0
    rate = prior_rate
    expected_precision = prior_shape / prior_rate
    # Running (weighted) averages of the released totals, the total weight of
    # the second moment's (below 1 while a positive learning_offset keeps the
    # first steps under 1: dividing by it removes the pull towards the zero
    # start), and the sum of its squared weights, which scales the noise
    # variance it holds.
    first_total = np.zeros(n_weights)
    second_total = np.zeros((n_weights, n_weights))
    second_weight = 0.0
    noise_variance_factor = 0.0
    covariance, mean = _gaussian_posterior(expected_precision * identity, first_total)
    # Without noise nothing hides float32's rounding: float64 throughout.
    e_step = _EStep(rows, labels, float32=engine.plan.noise_multiplier > 0)
    # The progress counts passes (n_iter is a whole number of them).
    releases_per_pass = max(1, n_iter // progress.total)
    for iteration in range(1, n_iter + 1):
        batch = engine.sample(n_samples) if sample_rate < 1.0 else None
        # Before the first release the posterior is the prior, N(0, I / E[a]).
        first_sum, second_sum = e_step(
            covariance + np.outer(mean, mean), batch=batch, isotropic=iteration == 1
        )
        noisy_first, noisy_second = engine.release(
            [first_sum, second_sum], sensitivities, symmetric=[False, True]
        )

        # Everything below is post-processing of the release. Each release
        # divided by q (a constant) estimates the total over the data set (in
        # full batch it is the release itself, with nothing of n in it), and
        # enters a running average. The first-moment statistic does not depend
        # on the posterior, so its releases are iid and their plain mean is the
        # best combination; the second moment does, so its average follows the
        # posterior with step rho_t.
        first_total += (noisy_first / sample_rate - first_total) / iteration
        step = (learning_offset + iteration) ** -learning_decay
        second_total = (1.0 - step) * second_total + step * (noisy_second / sample_rate)
        second_weight = (1.0 - step) * second_weight + step
        noise_variance_factor = (1.0 - step) ** 2 * noise_variance_factor + step**2
        second_average = second_total / second_weight
        # The averaged second moment is projected onto the PSD matrices with
        # eigenvalues at least the typical spectral radius of the noise it
        # holds, so that no direction is trusted more than the noise allows.
        floor = (
            _NOISE_FLOOR_FACTOR
            * second_noise_std
            * math.sqrt(noise_variance_factor * n_weights)
            / second_weight
        )
        covariance, mean, second_total_psd = _floored_posterior(
            second_average, floor, expected_precision, first_total
        )
        rate = prior_rate + 0.5 * (np.trace(covariance) + mean @ mean)
        expected_precision = shape / rate
        if progress.enabled and iteration % releases_per_pass == 0:
            # Both computed only when shown; a line per pass.
            objective = functools.partial(
                _released_objective,
                first_total,
                second_total_psd(),
                mean,
                covariance,
                shape,
                rate,
                prior_shape,
                prior_rate,
            )
            progress.update(
                iteration // releases_per_pass,
                objective=objective,
                epsilon_spent=lambda: engine.spent[0],
            )
    progress.close()
    return mean, covariance, shape, rate


def _log_expected_sigmoid(mean, std):
    """``log E[sigmoid(T)]`` for ``T ~ N(mean, std^2)``, elementwise.

    Gauss-Hermite quadrature where ``std <= 1``; elsewhere the trapezoid rule
    over the logistic density of ``E[sigmoid(T)] = E[Phi((mean - L) / std)]``,
    ``L`` standard logistic. Both sum positive terms in log space.
    """
    mean = np.asarray(mean, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    out = np.empty(mean.shape)
    narrow = std <= _QUADRATURE_SWITCH_STD
    if narrow.any():
        m, s = mean[narrow], std[narrow]
        points = m[:, None] + math.sqrt(2.0) * s[:, None] * _HERMITE_NODES[None, :]
        out[narrow] = special.logsumexp(
            _LOG_HERMITE_WEIGHTS[None, :] + special.log_expit(points), axis=1
        )
    wide = ~narrow
    if wide.any():
        m, s = mean[wide], std[wide]
        values = special.log_ndtr((m[:, None] - _TRAPEZOID_GRID[None, :]) / s[:, None])
        out[wide] = special.logsumexp(_LOG_TRAPEZOID_WEIGHTS[None, :] + values, axis=1)
    return np.minimum(out, 0.0)


class DPBayesLogReg(
    NamedOutputMixin, ClassifierMixin, TransformerMixin, CentralPrivacyEstimator
):
    """Differentially private Bayesian logistic regression (VIPS).

    Privacy: (epsilon, delta)-differential privacy for adding or removing one
    labelled row in full batch (``batch_size=None``, the default: nothing in
    the algorithm depends on the number of rows), and for replacing one
    labelled row by another when ``batch_size`` is set (the number of rows,
    which sets the sampling rate, is then public); ``neighbouring_relation_``
    names the relation of a fit. Each row ``x`` is clipped to Euclidean norm ``data_norm``
    (with ``fit_intercept``, the row ``[x * sqrt(3) / 2, data_norm / 2]`` is
    used, so the constant feature lies inside the same bound). Each iteration draws a
    Poisson-subsampled batch (rate ``q = batch_size / n_samples``, 1 for full
    batch) and releases the batch's two expected sufficient statistics,
    ``sum (y - 1/2) x`` (per-record norm at most ``data_norm / 2``) and
    ``sum E[omega] x x'`` (per-record Frobenius norm at most
    ``data_norm**2 / 4``, since a Polya-Gamma mean is at most 1/4), together
    as ONE Gaussian mechanism with per-block noise scaled to each block's
    sensitivity (:func:`~skprivfact.mechanisms.gaussian_mechanism`); the
    second-moment noise is a symmetric matrix (Analyze-Gauss) and the result
    is projected onto the PSD cone, which is post-processing. The noise
    multiplier is calibrated once per plan so that all the releases
    (``max_iter`` passes of ``ceil(1 / q)`` iterations), composed by the
    accountant (``accountant``: Renyi DP or the tight privacy loss
    distributions) for that relation, spend at most ``(epsilon, delta)``;
    ``privacy_spent_`` reports what the accountant computed. Batches and
    noise are drawn from the operating system's entropy, a fresh stream per
    release (:class:`~skprivfact.privacy.PrivacyEngine`); ``random_state``
    does not reach them. Everything fitted is post-processing of these
    releases. Not covered: ``data_norm=None``, which reads the bound off the
    data (a :class:`~skprivfact.exceptions.PrivacyLeakWarning` is issued and
    ``data_norm_`` reveals the largest row norm), and, with ``classes=None``,
    the two label values (``classes_``), read from ``y``. A :class:`~skprivfact.privacy.PrivacyBudget` passed as
    ``budget`` is charged by every fit, for one total across fits.
    ``epsilon=float("inf")`` runs the same algorithm without noise (with
    ``learning_decay="auto"``, as plain variational Bayes in full batch).

    The model is ``y ~ Bernoulli(sigmoid(w' x))``, ``w ~ N(0, I / a)``,
    ``a ~ Gamma(prior_shape, rate=prior_rate)``, fitted by variational Bayes
    with Polya-Gamma augmentation (Park, Foulds, Chaudhuri and Welling, 2020,
    section 6): q(w) is Gaussian, q(a) Gamma. Binary classification only (more
    than two classes is an error); dense input only. The released statistics enter
    running averages (see ``learning_decay``), which average the noise of
    the releases away, and the natural parameters of q(w) are computed from
    them; the averaged second moment is projected onto the positive semi-definite
    matrices with eigenvalues at least the typical spectral radius of the
    noise it holds (a data-independent floor), then the prior precision
    ``E[a]`` is added.

    With noise, the quantities that only steer the fit are computed in
    float32, whose rounding (relative 1e-7) lies far below the noise: each
    row's ``x' E[w w'] x``, which sets its weight ``E[omega]`` (any weight in
    [0, 1/4] keeps the bound above), and the eigendecomposition of the
    averaged second moment when its rounding is under a thousandth of the
    floor. The released sums, their clipping and their sensitivities are
    float64. Without noise everything is float64. Rows with at most a fifth
    of their entries non-zero take a sparse kernel.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget of the whole fit, positive; ``float("inf")`` for no
        noise.
    delta : float, default=1e-5
        Privacy parameter delta in (0, 1); choose it well below ``1 /
        n_samples`` (a subsampled fit, whose number of records is public,
        warns with :class:`~skprivfact.exceptions.PrivacyLeakWarning` if it
        is not).
    data_norm : float, default=None
        Bound on the Euclidean norm of each row of ``X``; longer rows are
        clipped to it, in :meth:`fit` and at prediction, with a warning except
        for a private fit's training rows. None takes the largest
        row norm of the training data, which a private fit leaks
        (:class:`~skprivfact.exceptions.PrivacyLeakWarning`).
    classes : array-like of shape (2,), default=None
        The two label values, public. None reads them from ``y``, which the
        guarantee does not cover (and a ``y`` of one class is then an
        error); given, every label of ``y`` must be one of them, and a ``y``
        of one class fits.
    fit_intercept : bool, default=True
        Whether to add a constant feature (inside the norm bound).
    max_iter : int, default=10
        Number of passes over the data; a pass is ``ceil(n_samples /
        batch_size)`` iterations, each one release, and the noise is
        calibrated for all of them. Without noise, full-batch variational
        Bayes has usually converged after 10.
    batch_size : int, default=None
        Expected batch size; each iteration keeps each row independently with
        probability ``batch_size / n_samples``. None (or a value of at least
        ``n_samples``) uses every row in every iteration.
    prior_shape : float, default=1.0
        Shape of the Gamma hyperprior on the weight precision ``a``.
    prior_rate : float, default=1.0
        Rate of the Gamma hyperprior on the weight precision ``a``.
    learning_decay : float or "auto", default="auto"
        Exponent ``kappa`` in [0, 1] of the step ``rho_t = (learning_offset +
        t) ** -kappa`` with which the averaged second-moment statistic follows
        the posterior (the first-moment statistic does not depend on the
        posterior, and its releases are averaged uniformly). 0 replaces it at
        every iteration: plain variational Bayes, the fastest to converge
        without noise. Larger values average more releases, and so more
        noise, away, at the cost of slower convergence. "auto" is 0 without
        noise and without subsampling, and 0.8 otherwise.
    learning_offset : float, default=0.0
        Offset ``tau_0 >= 0`` of the step; larger values damp the early
        iterations. The average is normalized by the total weight of its
        steps, so that an offset (first steps below 1) does not pull it
        towards its zero start.
    accountant : {"rdp", "pld"}, default="rdp"
        The privacy accountant: Renyi DP, or privacy loss distributions
        (tight: less noise for the same claim; needs dp-accounting).
    budget : PrivacyBudget, default=None
        A budget shared across fits (and copies, and a whole
        ``GridSearchCV``), charged by every release; a fit that would exceed
        it is refused once the input is validated, before anything is
        released or charged.
    secure : bool, default=False
        Draw floating-point-safe noise: each release is rounded to a fine grid
        and gets exact discrete Gaussian noise from the operating system's
        cryptographic randomness (Mironov 2012 showed how textbook
        floating-point noise can leak). Needs full batches and
        ``accountant="rdp"``; slower (a pure-Python sampler).
    verbose : int or "bar", default=0
        Progress in the format of every skprivfact estimator, per pass: 1
        prints about ten lines, 2 one per pass (the objective computable from
        the last release, the epsilon spent so far, elapsed time and time
        left); "bar" draws a tqdm bar (the ``progress`` extra).
    random_state : int, RandomState instance or None, default=None
        Seeds the batches of a fit without noise (``epsilon=inf``, no
        privacy), as any scikit-learn estimator's; a private fit's batches and
        noise never come from it.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        The two class labels, sorted (``classes`` or those of ``y``); the
        second is the positive class.
    coef_ : ndarray of shape (1, n_features)
        Posterior mean of the weights of the features.
    intercept_ : ndarray of shape (1,)
        Posterior mean of the intercept (0 without ``fit_intercept``).
    coef_covariance_ : ndarray of shape (n_coef, n_coef)
        Posterior covariance of ``(coef_[0], intercept_[0])``: ``n_coef`` is
        ``n_features + 1`` with the intercept last, or ``n_features`` without
        ``fit_intercept``.
    weight_precision_ : float
        Posterior mean of the weight precision ``a``.
    weight_precision_shape_ : float
        Shape of the Gamma posterior of ``a``.
    weight_precision_rate_ : float
        Rate of the Gamma posterior of ``a``.
    data_norm_ : float
        The norm bound used (``data_norm``, or the one read from the data).
    noise_multiplier_ : float
        Noise std of each release relative to its joint sensitivity (0 when
        ``epsilon`` is infinite).
    sample_rate_ : float
        Poisson sampling rate of the batches.
    learning_decay_ : float
        The step exponent used (``learning_decay`` with "auto" resolved).
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` spent by this fit, from the accountant (epsilon
        is infinite without noise).
    neighbouring_relation_ : {"add_remove", "substitution"}
        The relation ``privacy_spent_`` holds for.
    accountant_ : RDPAccountant or PLDAccountant
        The accountant, one step per release.
    reproducible_noise_ : bool
        Whether the fit ran inside
        :func:`~skprivfact.privacy.reproducible_noise` (not private).
    n_iter_ : int
        Number of passes run.
    n_releases_ : int
        Number of releases (iterations) run.
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`, when ``X`` has string
        column names.

    See Also
    --------
    sklearn.linear_model.LogisticRegression : Non-private, point estimate.

    References
    ----------
    M. Park, J. Foulds, K. Chaudhuri and M. Welling, "Variational Bayes in
    private settings (VIPS)", Journal of Artificial Intelligence Research 68,
    2020.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.logistic import DPBayesLogReg
    >>> rng = np.random.RandomState(0)
    >>> X = rng.normal(size=(2000, 3)) / 3
    >>> X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))  # norm <= data_norm
    >>> y = (X @ [3.0, -2.0, 0.0] + rng.logistic(size=2000) > 0).astype(int)
    >>> clf = DPBayesLogReg(epsilon=1.0, data_norm=1.0, random_state=0).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 2)
    >>> round(clf.privacy_spent_[0], 2) <= 1.0
    True
    """

    # Full batch uses every row and sums: the number of rows is not used.
    _full_batch_is_n_free = True
    # The columns of transform.
    _output_names = ("logit_mean", "logit_std")

    _parameter_constraints: dict = {
        **CentralPrivacyEstimator._parameter_constraints,
        "data_norm": [Interval(Real, 0, None, closed="neither"), None],
        "classes": ["array-like", None],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "prior_shape": [Interval(Real, 0, None, closed="neither")],
        "prior_rate": [Interval(Real, 0, None, closed="neither")],
        "learning_decay": [Interval(Real, 0, 1, closed="both"), StrOptions({"auto"})],
        "learning_offset": [Interval(Real, 0, None, closed="left")],
        "verbose": ["verbose", StrOptions({"bar"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        *,
        epsilon=1.0,
        delta=1e-5,
        data_norm=None,
        classes=None,
        fit_intercept=True,
        max_iter=10,
        batch_size=None,
        prior_shape=1.0,
        prior_rate=1.0,
        learning_decay="auto",
        learning_offset=0.0,
        accountant="rdp",
        budget=None,
        secure=False,
        verbose=0,
        random_state=None,
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.data_norm = data_norm
        self.classes = classes
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.batch_size = batch_size
        self.prior_shape = prior_shape
        self.prior_rate = prior_rate
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.accountant = accountant
        self.budget = budget
        self.secure = secure
        self.verbose = verbose
        self.random_state = random_state

    def _check_labels(self, y):
        y_type = type_of_target(y, input_name="y")
        if y_type != "binary":
            # scikit-learn's error (or warning) for targets that are not classes.
            check_classification_targets(y)
        if self.classes is not None:
            classes = np.unique(np.asarray(self.classes))
            if np.ndim(self.classes) != 1 or classes.size != 2 or len(self.classes) != 2:
                raise ValueError(
                    f"classes must hold two distinct labels; got {self.classes!r}."
                )
            if not np.all(np.isin(y, classes)):
                # The label is not named: it may be a private record's.
                raise ValueError("y holds a label that is not one of classes.")
            return classes
        classes = np.unique(y)
        if classes.size < 2:
            # The label is not named: it may be a private record's.
            raise ValueError(
                f"{type(self).__name__} needs samples of two classes; y holds one "
                "class only."
            )
        if y_type != "binary":
            raise ValueError(
                "Only binary classification is supported. The type of the target "
                f"is {y_type}, with {classes.size} classes."
            )
        return classes

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, **fit_params):
        """Fit the private variational posterior.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows (dense). Rows longer than ``data_norm`` are clipped.
        y : array-like of shape (n_samples,)
            Binary labels, of any two values.
        **fit_params : dict
            None accepted: ``sample_weight`` raises a TypeError saying why.

        Returns
        -------
        self : DPBayesLogReg
            The fitted estimator.
        """
        self._refuse_fit_params(fit_params)
        X, y = validate_input(
            self, X, y, dtype=[np.float64, np.float32], y_numeric=False
        )
        classes = self._check_labels(y)
        labels = (y == classes[1]).astype(np.float64)
        X = np.asarray(X, dtype=np.float64)

        if self.data_norm is None:
            if self._is_private:
                warnings.warn(
                    "data_norm is None: the largest row norm of X is used as the "
                    "norm bound. This reveals that norm and is not covered by the "
                    "privacy guarantee; set data_norm to a bound fixed "
                    "independently of the data.",
                    PrivacyLeakWarning,
                )
            largest = float(np.max(np.linalg.norm(X, axis=1)))
            data_norm = largest if largest > 0 else 1.0
        else:
            data_norm = float(self.data_norm)
        if not _MIN_DATA_NORM <= data_norm < _MAX_DATA_NORM:
            source = "the largest row norm of X" if self.data_norm is None else "data_norm"
            raise ValueError(
                f"{source} must lie in [{_MIN_DATA_NORM:g}, {_MAX_DATA_NORM:g}): its "
                "square bounds the released second moment. Rescale X (and data_norm)."
            )

        if not self._is_private:
            # Nothing is released without noise: the rows' norms may be told.
            _warn_if_clipped(X, data_norm)
        n_samples = X.shape[0]
        engine = self._start_privacy(n_samples, self.batch_size)
        self.classes_ = classes
        self.data_norm_ = data_norm
        if self.learning_decay == "auto":
            noise_free = self.noise_multiplier_ == 0 and self.sample_rate_ == 1.0
            self.learning_decay_ = 0.0 if noise_free else _AUTO_LEARNING_DECAY
        else:
            self.learning_decay_ = float(self.learning_decay)

        rows = _design_rows(X, self.data_norm_, self.fit_intercept)
        # The products are tall and thin and the matrices small (n_weights
        # square): a second BLAS thread costs more in synchronisation than it
        # saves (benchmarks/bench_logistic.py speed, a1a: 0.05 s with one
        # thread, 0.36 s with two on 2 busy cores).
        with _blas_controller().limit(limits=1, user_api="blas"):
            mean, covariance, shape, rate = _fit_vips(
                rows,
                labels,
                data_norm=self.data_norm_,
                engine=engine,
                n_iter=engine.plan.n_releases,
                prior_shape=self.prior_shape,
                prior_rate=self.prior_rate,
                learning_decay=self.learning_decay_,
                learning_offset=self.learning_offset,
                progress=self._make_progress(self.max_iter),
            )
        self.n_iter_ = self.max_iter
        scaling = _coef_scaling(X.shape[1], self.data_norm_, self.fit_intercept)
        coef = scaling * mean
        self.coef_covariance_ = covariance * np.outer(scaling, scaling)
        n_features = X.shape[1]
        self.coef_ = coef[np.newaxis, :n_features]
        self.intercept_ = np.array([coef[n_features] if self.fit_intercept else 0.0])
        self.weight_precision_shape_ = float(shape)
        self.weight_precision_rate_ = float(rate)
        self.weight_precision_ = float(shape / rate)
        return self

    def transform(self, X):
        """Posterior mean and standard deviation of the logit of each row.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows, clipped to ``data_norm_`` as in :meth:`fit` (with a warning
            when some row is longer).

        Returns
        -------
        logit_moments : ndarray of shape (n_samples, 2)
            Column 0 the posterior mean of ``w' x``, column 1 its standard
            deviation.
        """
        return self._logit_moments(X)

    def fit_transform(self, X, y=None, **fit_params):
        """Fit to ``(X, y)``, then :meth:`transform` ``X``.

        In a private fit, rows of ``X`` longer than ``data_norm`` are clipped
        without the warning :meth:`transform` gives: whether a training row
        lies beyond the bound is not released.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,)
            Training labels.
        **fit_params : dict
            None accepted (see :meth:`fit`).

        Returns
        -------
        logit_moments : ndarray of shape (n_samples, 2)
            As :meth:`transform` gives them.
        """
        self.fit(X, y, **fit_params)
        return self._logit_moments(X, warn=not self._is_private)

    def _logit_moments(self, X, warn=True):
        """:meth:`transform`'s array, whatever output ``set_output`` asks of it."""
        check_is_fitted(self)
        X = validate_input(self, X, reset=False, dtype=[np.float64, np.float32])
        X = np.asarray(X, dtype=np.float64)
        if warn:
            _warn_if_clipped(X, self.data_norm_)
        X = clip_rows(X, self.data_norm_)
        mean = X @ self.coef_[0] + self.intercept_[0]
        if self.fit_intercept:
            X = np.hstack([X, np.ones((X.shape[0], 1))])
        variance = np.einsum("ij,ij->i", X @ self.coef_covariance_, X)
        return np.column_stack([mean, np.sqrt(np.maximum(variance, 0.0))])

    def _log_proba(self, X):
        moments = self._logit_moments(X)
        log_positive = np.empty(moments.shape[0])
        log_negative = np.empty(moments.shape[0])
        for start in range(0, moments.shape[0], _PREDICT_CHUNK):
            chunk = moments[start : start + _PREDICT_CHUNK]
            log_positive[start : start + _PREDICT_CHUNK] = _log_expected_sigmoid(
                chunk[:, 0], chunk[:, 1]
            )
            log_negative[start : start + _PREDICT_CHUNK] = _log_expected_sigmoid(
                -chunk[:, 0], chunk[:, 1]
            )
        return log_negative, log_positive

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows.

        Returns
        -------
        log_proba : ndarray of shape (n_samples, 2)
            Log-probabilities of ``classes_``.
        """
        log_negative, log_positive = self._log_proba(X)
        log_total = np.logaddexp(log_negative, log_positive)
        return np.column_stack([log_negative - log_total, log_positive - log_total])

    def predict_proba(self, X):
        """Posterior predictive class probabilities.

        The logistic function is integrated over the Gaussian posterior of the
        logit, ``E[sigmoid(w' x)]`` (numerical quadrature), rather than
        evaluated at the posterior mean: uncertain rows get probabilities
        closer to 1/2.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows.

        Returns
        -------
        proba : ndarray of shape (n_samples, 2)
            Probabilities of ``classes_``; rows sum to 1.
        """
        return np.exp(self.predict_log_proba(X))

    def decision_function(self, X):
        """Compute the log-odds of the posterior predictive of ``classes_[1]``.

        ``log(p / (1 - p))`` with ``p`` from :meth:`predict_proba`: positive
        exactly where the posterior mean of the logit is positive, and smaller
        in magnitude than that mean where the posterior is uncertain.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows.

        Returns
        -------
        scores : ndarray of shape (n_samples,)
            The predictive log-odds.
        """
        log_negative, log_positive = self._log_proba(X)
        return log_positive - log_negative

    def predict(self, X):
        """Predict the class of each row (the more probable one).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Rows.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(int)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        # Noise costs accuracy on the small data sets of generic checks.
        tags.classifier_tags.poor_score = not (
            isinstance(self.epsilon, Real) and math.isinf(self.epsilon)
        )
        return tags
