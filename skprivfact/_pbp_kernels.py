"""numba kernels of :class:`~skprivfact.sep.DPSEPRegressor`'s network model.

Probabilistic backpropagation (Hernandez-Lobato and Adams, 2015) for a network
with one hidden ReLU layer and factorized Gaussian weights: the means and
variances of the activations are propagated through the layers, the log of the
Gaussian normaliser ``Z = N(y | m_z, v_z + noise_variance)`` is differentiated
with respect to every weight's mean and variance by hand-written
backpropagation, and the moments of the tilted distribution follow from

    m_new = m + v dlogZ/dm,    v_new = v - v**2 ((dlogZ/dm)**2 - 2 dlogZ/dv).

The site of a row is ``proj[tilted] / cavity`` in natural parameters
(precision ``1/v_new - 1/v``, precision times mean ``m_new/v_new - m/v``).

Layout of the weights (one flat vector of ``n_weights = n_hidden * (n_inputs +
1) + n_hidden + 1`` entries): the hidden layer's matrix row by row, the bias
last in each row, then the output weights with the output bias last. Each
layer's input is divided by the square root of its length (bias included), as
in probabilistic backpropagation, so that a unit prior keeps the
pre-activations of order one whatever the width.

No kernel draws random numbers or writes shared state: results do not depend
on the number of threads.
"""

import math

import numpy as np
from numba import njit, prange

from ._clip_kernels import clip_row_inplace

__all__ = [
    "mlp_clipped_mean_site_sum",
    "mlp_mean_sites",
    "mlp_predictive_moments",
    "mlp_sites",
    "noise_sites",
]

_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_LOG_2PI = math.log(2.0 * math.pi)
# Smallest variance of an activation: keeps 1/sqrt(v) finite when every
# incoming weight variance underflows.
_TINY_VARIANCE = 1e-300


@njit(cache=True, nogil=True)
def _relu_moments(mean, variance):
    """Mean, variance, Phi(alpha), phi(alpha) and std of relu(a), a ~ N(mean, variance)."""
    std = math.sqrt(max(variance, _TINY_VARIANCE))
    alpha = mean / std
    cdf = 0.5 * math.erfc(-alpha * _INV_SQRT_2)
    pdf = _INV_SQRT_2PI * math.exp(-0.5 * alpha * alpha)
    # E[relu(a)] = std (alpha Phi + phi) and E[relu(a)^2] = variance
    # ((alpha^2 + 1) Phi + alpha phi); written in units of std so that the
    # variance keeps its relative accuracy for very negative alpha.
    first = alpha * cdf + pdf
    relu_mean = std * max(first, 0.0)
    second = (alpha * alpha + 1.0) * cdf + alpha * pdf
    relu_variance = variance * max(second - first * first, 0.0)
    return relu_mean, relu_variance, cdf, pdf, std


@njit(cache=True, nogil=True)
def _forward(x, weight_mean, weight_var, n_hidden, hid_mean, hid_var, cdf, pdf, pre_std):
    """Moments of every activation of one row; returns (m_z, v_z).

    Fills, per hidden unit, the mean and variance of its output and, for the
    backward pass, Phi and phi at its pre-activation's standardized mean and
    the pre-activation's standard deviation.
    """
    n_inputs = x.shape[0]
    row_len = n_inputs + 1
    input_scale = 1.0 / math.sqrt(row_len)
    out_offset = n_hidden * row_len
    out_scale = 1.0 / math.sqrt(n_hidden + 1)
    out_mean = 0.0
    out_var = 0.0
    for k in range(n_hidden):
        base = k * row_len
        mean = weight_mean[base + n_inputs]
        var = weight_var[base + n_inputs]
        for j in range(n_inputs):
            mean += weight_mean[base + j] * x[j]
            var += weight_var[base + j] * x[j] * x[j]
        mean *= input_scale
        var *= input_scale * input_scale
        hm, hv, c, p, s = _relu_moments(mean, var)
        hid_mean[k] = hm
        hid_var[k] = hv
        cdf[k] = c
        pdf[k] = p
        pre_std[k] = s
        w_mean = weight_mean[out_offset + k]
        w_var = weight_var[out_offset + k]
        out_mean += w_mean * hm
        out_var += w_mean * w_mean * hv + w_var * (hm * hm + hv)
    # The output bias multiplies the constant 1.
    out_mean += weight_mean[out_offset + n_hidden]
    out_var += weight_var[out_offset + n_hidden]
    return out_mean * out_scale, out_var * out_scale * out_scale


@njit(cache=True, parallel=True)
def mlp_predictive_moments(X, weight_mean, weight_var, n_hidden):
    """Mean and variance of the network output (without observation noise) per row."""
    n_rows = X.shape[0]
    means = np.empty(n_rows)
    variances = np.empty(n_rows)
    for i in prange(n_rows):
        buffers = np.empty((5, n_hidden))
        m_z, v_z = _forward(
            X[i], weight_mean, weight_var, n_hidden, buffers[0], buffers[1],
            buffers[2], buffers[3], buffers[4],
        )
        means[i] = m_z
        variances[i] = v_z
    return means, variances


@njit(cache=True, nogil=True)
def _log_normal_pdf(y, mean, variance):
    r = y - mean
    return -0.5 * (_LOG_2PI + math.log(variance) + r * r / variance)


@njit(cache=True, nogil=True)
def _noise_site(y, out_mean, out_var, shape, rate):
    """Change of the Gamma(shape, rate) of the noise precision under one row.

    The moments of the tilted distribution of the precision follow from the
    normalisers at shape, shape + 1 and shape + 2, each approximated, as in
    probabilistic backpropagation, by a Gaussian whose noise variance is the
    mean of 1 / precision, ``rate / (shape - 1)``.
    """
    log_z0 = _log_normal_pdf(y, out_mean, out_var + rate / (shape - 1.0))
    log_z1 = _log_normal_pdf(y, out_mean, out_var + rate / shape)
    log_z2 = _log_normal_pdf(y, out_mean, out_var + rate / (shape + 1.0))
    ratio_shape = math.exp(log_z0 + log_z2 - 2.0 * log_z1) * (shape + 1.0) / shape - 1.0
    ratio_rate = (
        math.exp(log_z2 - log_z1) * (shape + 1.0) - math.exp(log_z1 - log_z0) * shape
    ) / rate
    if not (ratio_shape > 0.0 and ratio_rate > 0.0):
        return 0.0, 0.0
    new_shape = 1.0 / ratio_shape
    new_rate = 1.0 / ratio_rate
    if not (math.isfinite(new_shape) and math.isfinite(new_rate)):
        return 0.0, 0.0
    return new_shape - shape, new_rate - rate


# Serial: batches hold at most a few dozen rows, for which starting a thread
# team costs more than the rows themselves.
@njit(cache=True, nogil=True)
def mlp_sites(X, y, weight_mean, weight_var, n_hidden, noise_shape, noise_rate,
              learn_noise, noise_variance):
    """Natural parameters of each row's site, computed at the cavity.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_inputs)
        Scaled inputs of the batch.
    y : ndarray of shape (n_rows,)
        Scaled targets of the batch.
    weight_mean, weight_var : ndarray of shape (n_weights,)
        Cavity means and variances of the weights.
    n_hidden : int
        Number of hidden units.
    noise_shape, noise_rate : float
        Cavity Gamma distribution of the noise precision (used when
        ``learn_noise``); ``noise_shape`` must exceed 1.
    learn_noise : bool
        Whether the noise precision has a Gamma factor; otherwise
        ``noise_variance`` is the fixed noise variance.
    noise_variance : float
        Fixed noise variance (ignored when ``learn_noise``).

    Returns
    -------
    sites : ndarray of shape (n_rows, 2 * n_weights + 2)
        Per row: the precision of each weight's site, then precision times
        mean, then the change of the noise Gamma's shape and rate (zero when
        the noise is fixed). A weight whose tilted variance is not positive
        (the moment match failed) gets a zero site, as probabilistic
        backpropagation skips such updates.
    """
    n_rows, n_inputs = X.shape
    n_weights = weight_mean.shape[0]
    row_len = n_inputs + 1
    out_offset = n_hidden * row_len
    input_scale2 = 1.0 / row_len
    input_scale = math.sqrt(input_scale2)
    out_scale2 = 1.0 / (n_hidden + 1)
    out_scale = math.sqrt(out_scale2)
    if learn_noise:
        used_noise_variance = noise_rate / (noise_shape - 1.0)
    else:
        used_noise_variance = noise_variance
    sites = np.zeros((n_rows, 2 * n_weights + 2))
    # scratch shared by the rows (the loop is serial)
    buffers = np.empty((5, n_hidden))
    hid_mean = buffers[0]
    hid_var = buffers[1]
    cdf = buffers[2]
    pdf = buffers[3]
    pre_std = buffers[4]
    grad_mean = np.empty(n_weights)
    grad_var = np.empty(n_weights)
    for i in range(n_rows):
        x = X[i]
        m_z, v_z = _forward(
            x, weight_mean, weight_var, n_hidden, hid_mean, hid_var, cdf, pdf, pre_std
        )
        total_var = v_z + used_noise_variance
        residual = y[i] - m_z
        grad_m_z = residual / total_var
        grad_v_z = 0.5 * (residual * residual / total_var - 1.0) / total_var
        # Output layer: m_z = s * sum_k w_k h_k and
        # v_z = s^2 sum_k (w_k^2 v_hk + v_wk (h_k^2 + v_hk)), with h = 1, v_h = 0
        # for the bias.
        for k in range(n_hidden + 1):
            if k < n_hidden:
                h_mean = hid_mean[k]
                h_var = hid_var[k]
            else:
                h_mean = 1.0
                h_var = 0.0
            w_mean = weight_mean[out_offset + k]
            grad_mean[out_offset + k] = (
                grad_m_z * h_mean * out_scale + grad_v_z * 2.0 * w_mean * h_var * out_scale2
            )
            grad_var[out_offset + k] = grad_v_z * (h_mean * h_mean + h_var) * out_scale2
        for k in range(n_hidden):
            w_mean = weight_mean[out_offset + k]
            w_var = weight_var[out_offset + k]
            h_mean = hid_mean[k]
            # Gradients with respect to the hidden unit's mean and variance.
            grad_h_mean = grad_m_z * w_mean * out_scale + grad_v_z * 2.0 * w_var * h_mean * out_scale2
            grad_h_var = grad_v_z * (w_mean * w_mean + w_var) * out_scale2
            # Through the ReLU moments: d mean/d mu = Phi,
            # d mean/d s = phi / (2 std), d var/d mu = 2 mean (1 - Phi),
            # d var/d s = Phi - mean phi / std (s the pre-activation variance).
            c = cdf[k]
            p = pdf[k]
            s = pre_std[k]
            grad_pre_mean = grad_h_mean * c + grad_h_var * 2.0 * h_mean * (1.0 - c)
            grad_pre_var = grad_h_mean * p / (2.0 * s) + grad_h_var * (c - h_mean * p / s)
            base = k * row_len
            for j in range(row_len):
                xj = x[j] if j < n_inputs else 1.0
                grad_mean[base + j] = grad_pre_mean * xj * input_scale
                grad_var[base + j] = grad_pre_var * xj * xj * input_scale2
        for w in range(n_weights):
            mean = weight_mean[w]
            var = weight_var[w]
            gm = grad_mean[w]
            new_var = var - var * var * (gm * gm - 2.0 * grad_var[w])
            new_mean = mean + var * gm
            if not (new_var > 0.0 and math.isfinite(new_var) and math.isfinite(new_mean)):
                continue
            site_precision = 1.0 / new_var - 1.0 / var
            site_shift = new_mean / new_var - mean / var
            if math.isfinite(site_precision) and math.isfinite(site_shift):
                sites[i, w] = site_precision
                sites[i, n_weights + w] = site_shift
        if learn_noise:
            d_shape, d_rate = _noise_site(y[i], m_z, v_z, noise_shape, noise_rate)
            sites[i, 2 * n_weights] = d_shape
            sites[i, 2 * n_weights + 1] = d_rate
    return sites


@njit(cache=True, nogil=True)
def _mean_sites_row(x, target, weight_mean, n_hidden, noise_variance, hidden, active, slope, out, i):
    """Write one row's sites at the weight means into ``out[i]`` (see
    :func:`mlp_mean_sites`); ``hidden``, ``active`` and ``slope`` are
    scratch."""
    n_inputs = x.shape[0]
    n_weights = weight_mean.shape[0]
    row_len = n_inputs + 1
    out_offset = n_hidden * row_len
    input_scale = 1.0 / math.sqrt(row_len)
    out_scale = 1.0 / math.sqrt(n_hidden + 1)
    output = weight_mean[out_offset + n_hidden]
    for k in range(n_hidden):
        base = k * row_len
        pre = weight_mean[base + n_inputs]
        for j in range(n_inputs):
            pre += weight_mean[base + j] * x[j]
        pre *= input_scale
        # At a pre-activation of exactly 0 the slope is taken as 0 (the
        # limit of Phi there is 1/2; a set of measure zero).
        active[k] = pre > 0.0
        hidden[k] = pre if active[k] else 0.0
        output += weight_mean[out_offset + k] * hidden[k]
    output *= out_scale
    for k in range(n_hidden):
        slope[out_offset + k] = hidden[k] * out_scale
        base = k * row_len
        unit_slope = 0.0
        if active[k]:
            unit_slope = weight_mean[out_offset + k] * out_scale * input_scale
        for j in range(n_inputs):
            slope[base + j] = unit_slope * x[j]
        slope[base + n_inputs] = unit_slope
    slope[out_offset + n_hidden] = out_scale
    residual_over_variance = (target - output) / noise_variance
    for w in range(n_weights):
        out[i, w] = slope[w] * slope[w] / noise_variance
        out[i, n_weights + w] = residual_over_variance * slope[w]


# Serial, as mlp_sites.
@njit(cache=True, nogil=True)
def mlp_mean_sites(X, y, weight_mean, n_hidden, noise_variance):
    """Each row's sites at the weight means: the limit of :func:`mlp_sites`
    as every weight variance goes to zero.

    The network is evaluated at the means (a plain ReLU network). With
    ``g = d mu / d w`` the gradient of its output ``mu`` and ``r = y - mu``,
    the limit of the shift site less the mean times the precision site is
    ``r g / noise_variance``, the gradient of the Gaussian log-likelihood,
    and that of the precision site ``g**2 / noise_variance``, the diagonal
    of the Gauss-Newton matrix.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_inputs)
        Scaled inputs of the batch.
    y : ndarray of shape (n_rows,)
        Scaled targets of the batch.
    weight_mean : ndarray of shape (n_weights,)
        Means of the weights.
    n_hidden : int
        Number of hidden units.
    noise_variance : float
        Variance of the observation noise, positive.

    Returns
    -------
    sites : ndarray of shape (n_rows, 2 * n_weights)
        Per row: the precision site of each weight, then the gradient of the
        row's log-likelihood in each weight.
    """
    n_weights = weight_mean.shape[0]
    sites = np.zeros((X.shape[0], 2 * n_weights))
    hidden = np.empty(n_hidden)
    active = np.empty(n_hidden, dtype=np.bool_)
    slope = np.empty(n_weights)
    for i in range(X.shape[0]):
        _mean_sites_row(
            X[i], y[i], weight_mean, n_hidden, noise_variance, hidden, active, slope, sites, i
        )
    return sites


@njit(cache=True, nogil=True)
def mlp_clipped_mean_site_sum(
    X, y, rows, weight_mean, n_hidden, noise_variance, precision_weight,
    max_norm, error_bound, factor_low, factor_high,
):
    """The sum over ``rows`` of each row's clipped contribution: its sites at
    the weight means (:func:`mlp_mean_sites`), the precision block times
    ``precision_weight``, clipped to Euclidean norm ``max_norm`` by
    :func:`~skprivfact._clip_kernels.clip_row_inplace` (whose norm bound the
    remaining arguments give, as :func:`skprivfact.mechanisms.clip_rows`
    passes them).

    One row at a time, without the batch's array of sites: the same floats,
    to the bit, as clipping :func:`mlp_mean_sites`'s rows of ``X[rows]``
    with :func:`~skprivfact.mechanisms.clip_rows` and summing them with
    ``sum(axis=0)`` (which adds the rows in order), as the tests check. A
    row with a non-finite entry (its sites overflowed) contributes nothing,
    a map of that row alone, so the sensitivity holds.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_inputs)
        Scaled inputs of every row.
    y : ndarray of shape (n_samples,)
        Scaled targets of every row.
    rows : ndarray of shape (n_batch,), int
        Indices of the batch's rows, each in ``[0, n_samples)`` (not
        checked: the caller's batch sampler draws them).
    weight_mean, n_hidden, noise_variance
        As for :func:`mlp_mean_sites`.
    precision_weight : float
        Factor of the precision sites.
    max_norm : float
        Bound on each row's norm, above ``2**-960`` (the clipped entries stay
        normal floats).
    error_bound, factor_low, factor_high : float
        As for :func:`~skprivfact._clip_kernels.clip_row_inplace`.

    Returns
    -------
    total : ndarray of shape (2 * n_weights,)
    """
    if not max_norm > 2.0**-960:
        raise ValueError("max_norm must exceed 2**-960 (clip_rows handles smaller bounds).")
    n_weights = weight_mean.shape[0]
    contribution = np.empty((1, 2 * n_weights))
    total = np.zeros(2 * n_weights)
    hidden = np.empty(n_hidden)
    active = np.empty(n_hidden, dtype=np.bool_)
    slope = np.empty(n_weights)
    # the buffer's one row, as an int64 rather than the literal 0, for which
    # numba would compile the callees a second time
    first = np.int64(0)
    for r in range(rows.shape[0]):
        i = rows[r]
        _mean_sites_row(
            X[i], y[i], weight_mean, n_hidden, noise_variance, hidden, active, slope,
            contribution, first,
        )
        for w in range(n_weights):
            contribution[0, w] *= precision_weight
        if clip_row_inplace(contribution, first, max_norm, error_bound, factor_low,
                            factor_high):
            for w in range(2 * n_weights):
                total[w] += contribution[0, w]
    return total


@njit(cache=True)
def noise_sites(y, out_mean, out_var, noise_shape, noise_rate):
    """Per-row change of the noise Gamma's (shape, rate), shape (n_rows, 2)."""
    n_rows = y.shape[0]
    out = np.empty((n_rows, 2))
    for i in range(n_rows):
        d_shape, d_rate = _noise_site(y[i], out_mean[i], out_var[i], noise_shape, noise_rate)
        out[i, 0] = d_shape
        out[i, 1] = d_rate
    return out
