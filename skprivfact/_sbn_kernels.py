"""numba kernels of :class:`~skprivfact.sbn.DPSigmoidBeliefNet`.

The local (per-record) step of the sigmoid belief network works on packed
upper triangles of ``(K + 1) x (K + 1)`` symmetric matrices, ``K`` hidden units
and a constant: entry ``(k, l)``, ``k <= l``, sits at ``tri_index[k, l]``
(``numpy.triu_indices`` order). The heavy contractions over the visible units
are matrix products done by the caller (BLAS); the kernels here do the
record-wise parts: the expected outer products ``E[h~ h~']`` under the
mean-field Bernoulli posterior, the Gauss-Seidel sweep over the hidden units,
and the importance-sampled log-likelihood. No kernel draws random numbers.
"""

import math

import numpy as np
from numba import njit

__all__ = [
    "expected_outer_tri",
    "importance_log_likelihood",
    "mean_field_sweep",
    "polya_gamma_mean",
    "tri_index",
]

# Below this |c| the series tanh(c/2)/(2c) = 1/4 - c^2/48 + ... is used.
_SMALL_LOGIT_SCALE = 1e-4


def tri_index(size):
    """``(size, size)`` int array: the packed position of entry ``(k, l)``."""
    rows, cols = np.triu_indices(size)
    index = np.empty((size, size), dtype=np.int64)
    index[rows, cols] = np.arange(rows.size)
    index[cols, rows] = np.arange(rows.size)
    return index


@njit(cache=True, nogil=True)
def _sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


@njit(cache=True, nogil=True)
def _log_sigmoid(x):
    # log(1 / (1 + exp(-x))), stable on both sides.
    if x >= 0.0:
        return -math.log1p(math.exp(-x))
    return x - math.log1p(math.exp(x))


@njit(cache=True, nogil=True)
def polya_gamma_mean(squared_scale, out):
    """``E[omega] = tanh(c / 2) / (2 c)`` with ``c = sqrt(squared_scale)``, in place.

    Never above 1/4 (the value at ``c = 0``), even after rounding: each
    record's contribution bound rests on it.
    """
    flat_in = squared_scale.ravel()
    flat_out = out.ravel()
    for i in range(flat_in.size):
        c = math.sqrt(max(flat_in[i], 0.0))
        if c < _SMALL_LOGIT_SCALE:
            value = 0.25 - c * c / 48.0
        else:
            # tanh(c / 2) = (1 - e^-c) / (1 + e^-c): one exp, about twice as
            # fast as tanh here, within a few ulps for c >= 1e-4.
            t = math.exp(-c)
            value = (1.0 - t) / ((1.0 + t) * (2.0 * c))
        flat_out[i] = min(value, 0.25)


@njit(cache=True, nogil=True)
def expected_outer_tri(mu, out):
    """Packed upper triangles of ``E[h~ h~']``, ``h~ = [h; 1]``, ``h ~ Bern(mu)``.

    Off the diagonal ``mu_k mu_l``; on it ``mu_k`` (``h^2 = h``); the constant
    column ``mu_k`` and the corner 1. Row order is ``numpy.triu_indices``.
    """
    n, n_hidden = mu.shape
    for i in range(n):
        position = 0
        for k in range(n_hidden):
            mk = mu[i, k]
            out[i, position] = mk
            position += 1
            for l in range(k + 1, n_hidden):
                out[i, position] = mk * mu[i, l]
                position += 1
            out[i, position] = mk
            position += 1
        out[i, position] = 1.0


@njit(cache=True, nogil=True)
def mean_field_sweep(mu, linear, quadratic_tri, index):
    """One Gauss-Seidel sweep of the mean-field update of every ``q(h_n)``.

    For each record and each hidden unit ``k`` in turn::

        logit(mu_k) = linear_k - Q_kk / 2 - Q_k,const - sum_{l != k} Q_kl mu_l

    with ``Q = sum_j E[omega_j] E[theta_j theta_j']`` given packed in
    ``quadratic_tri`` (one row per record). Updates ``mu`` in place.
    """
    n, n_hidden = mu.shape
    const = n_hidden
    for i in range(n):
        for k in range(n_hidden):
            value = linear[i, k] - 0.5 * quadratic_tri[i, index[k, k]]
            value -= quadratic_tri[i, index[k, const]]
            for l in range(n_hidden):
                if l != k:
                    value -= quadratic_tri[i, index[k, l]] * mu[i, l]
            mu[i, k] = _sigmoid(value)


@njit(cache=True, nogil=True)
def importance_log_likelihood(
    X, proposal, uniforms, weights, visible_bias, hidden_logits, out
):
    """Importance-sampled ``log p(v)`` of each row under a point SBN.

    The proposal of row ``i`` is the product of Bernoulli(``proposal[i]``);
    sample ``s`` sets ``h_k = uniforms[s, k] < proposal[i, k]`` (the same
    uniforms for every row, so each row's estimate depends on that row only).
    ``out[i] = log mean_s p(v_i, h_s) / q(h_s)``, computed in log space.
    """
    n, n_features = X.shape
    n_draws, n_hidden = uniforms.shape
    log_prior_on = np.empty(n_hidden)
    log_prior_off = np.empty(n_hidden)
    for k in range(n_hidden):
        log_prior_on[k] = _log_sigmoid(hidden_logits[k])
        log_prior_off[k] = _log_sigmoid(-hidden_logits[k])
    log_weights = np.empty(n_draws)
    h = np.empty(n_hidden)
    for i in range(n):
        for s in range(n_draws):
            log_w = 0.0
            for k in range(n_hidden):
                p = proposal[i, k]
                if uniforms[s, k] < p:
                    h[k] = 1.0
                    log_w += log_prior_on[k] - math.log(p)
                else:
                    h[k] = 0.0
                    log_w += log_prior_off[k] - math.log1p(-p)
            for j in range(n_features):
                logit = visible_bias[j]
                for k in range(n_hidden):
                    if h[k] > 0.0:
                        logit += weights[j, k]
                # log p(v | logit) = v logit - log(1 + e^logit), for v in [0, 1].
                log_w += X[i, j] * logit + _log_sigmoid(-logit)
            log_weights[s] = log_w
        top = log_weights.max()
        total = 0.0
        for s in range(n_draws):
            total += math.exp(log_weights[s] - top)
        out[i] = top + math.log(total / n_draws)
