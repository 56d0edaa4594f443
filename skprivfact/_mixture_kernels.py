"""numba kernel of :class:`~skprivfact.DPSEPGaussianMixture`'s sites.

For each record and component, at the cavity ``N(m_k, v_k I)``: the
responsibility ``r_k`` under the predictive ``pi_k N(z; m_k, (s2 + v_k) I)``,
the moment-matched tilted mean ``M_k = m_k + r_k g_k (z - m_k)`` and variance
``V_k = v_k - r_k g_k v_k + r_k (1 - r_k) g_k**2 |z - m_k|**2 / d`` (gain
``g_k = v_k / (v_k + s2)``), and the site ``(1 / V_k - 1 / v_k, M_k / V_k -
m_k / v_k)``, written row by row as ``[precision_1, shift_1 (d), ...,
precision_K, shift_K (d)]``.

One serial pass over the records, with no temporaries of size ``n * K * d``
(about 0.04 s for 100,000 records, 4 components in 4 dimensions, against
0.27 s for the vectorised numpy version it replaced; a parallel loop was no
faster on two shared cores and cost tens of milliseconds per call on the
small batches of a pass). No random numbers.
"""

import math

import numpy as np
from numba import njit


@njit(cache=True)
def mixture_sites(Z, means, variance, log_weights, noise_variance):
    n, d = Z.shape
    k_count = means.shape[0]
    width = d + 1
    out = np.empty((n, k_count * width))
    spread = variance + noise_variance
    gain = variance / spread
    log_norm = np.empty(k_count)
    for k in range(k_count):
        log_norm[k] = log_weights[k] - 0.5 * d * math.log(spread[k])
    for i in range(n):
        distance = np.empty(k_count)
        logits = np.empty(k_count)
        top = -np.inf
        for k in range(k_count):
            total = 0.0
            for j in range(d):
                diff = Z[i, j] - means[k, j]
                total += diff * diff
            distance[k] = total
            logits[k] = log_norm[k] - total / (2.0 * spread[k])
            if logits[k] > top:
                top = logits[k]
        norm = 0.0
        for k in range(k_count):
            logits[k] = math.exp(logits[k] - top)
            norm += logits[k]
        for k in range(k_count):
            r = logits[k] / norm
            g = gain[k]
            v = variance[k]
            new_var = v - r * g * v + r * (1.0 - r) * g * g * distance[k] / d
            base = k * width
            out[i, base] = 1.0 / new_var - 1.0 / v
            step = r * g
            for j in range(d):
                m = means[k, j]
                new_mean = m + step * (Z[i, j] - m)
                out[i, base + 1 + j] = new_mean / new_var - m / v
    return out
