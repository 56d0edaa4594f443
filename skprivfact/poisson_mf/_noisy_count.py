"""The true count behind a noisy count, with the noise marginalised (numba).

Given the observed k = y + tau, tau ~ 2Geo(alpha), and a Poisson rate r for
y, the conditional law of the true count is

    P(y | k, r)  proportional to  r**y / y! * alpha**|k - y|,   y = 0, 1, ...

(the two-sided geometric noise integrates out the Poisson-gamma noise rates
of the augmentation of Schein et al. exactly). For k <= 0 it is Poisson(r
alpha); otherwise it is Poisson(r / alpha) below k and Poisson(r alpha) above,
joined at k. It is discrete log-concave: the ratio P(y + 1) / P(y) = c(y) /
(y + 1), with c(y) = r / alpha for y < k and r alpha from k on, decreases in
y. The functions below work from the mode outward in units of the mode's
term, as ``_bessel`` does. For a mode above ``_STRIDE_FROM`` the sums step
over the support with a stride of about a quarter of the profile's
width, taking each term from its closed form (a trapezoid rule on a
smooth, Gaussian-like profile, relative error far below 1e-8); the work per
entry is then bounded whatever the count, instead of growing with its square
root.
"""

import math

from numba import njit

# Terms below this fraction of the running total end a sum (log-concave: the
# rest of the tail is smaller still).
_TAIL_CUTOFF = 1e-17
_STRIDE_FROM = 4096.0
# The strided sums stop earlier: 7 standard deviations of a Gaussian-like
# profile, whose relative error there is already below 1e-10.
_STRIDED_CUTOFF = 1e-12


def noise_std(alpha):
    """Standard deviation of one two-sided geometric draw tau ~ 2Geo(alpha)."""
    return math.sqrt(2.0 * alpha) / (1.0 - alpha)


@njit(cache=True)
def _mode(count, rate, alpha):
    """Mode of P(y | count, rate), for count > 0 and rate > 0."""
    low = rate / alpha
    if low < count:
        return math.floor(low)
    high = rate * alpha
    if high < count + 1.0:
        return count
    return math.floor(high)


@njit(cache=True)
def _log_term(y, count, log_rate, log_alpha):
    # log of r**y / y! * alpha**|k - y|
    return y * log_rate - math.lgamma(y + 1.0) + abs(count - y) * log_alpha


@njit(cache=True)
def _strided_moments(count, rate, alpha, mode):
    """(E[y], Var[y]) by a strided sum for a large mode."""
    log_rate = math.log(rate)
    log_alpha = math.log(alpha)
    # the width of the profile: sqrt(mode) in a Poisson-like bulk, less
    # where the mode sits at the kink y = count and the terms fall fast
    low = rate / alpha
    up_ratio = (low if mode < count else rate * alpha) / (mode + 1.0)
    down_ratio = (low if mode - 1.0 < count else rate * alpha) / mode
    width = min(math.sqrt(mode), 1.0 / max(-math.log(up_ratio), 1e-300),
                1.0 / max(math.log(down_ratio), 1e-300))
    step = math.floor(width / 4.0)
    if step <= 1.0:
        # a narrow profile (the mode at the kink): few terms, by their ratios
        return _exact_moments(count, low, rate * alpha, mode)
    log_mode_term = _log_term(mode, count, log_rate, log_alpha)
    total = 1.0
    first = 0.0
    second = 0.0
    for direction in (1.0, -1.0):
        offset = direction * step
        while True:
            y = mode + offset
            if y < 0.0:
                break
            weight = math.exp(_log_term(y, count, log_rate, log_alpha) - log_mode_term)
            total += weight
            first += offset * weight
            second += offset * offset * weight
            if weight < _STRIDED_CUTOFF * total:
                break
            offset += direction * step
    mean_offset = first / total
    return mode + mean_offset, max(second / total - mean_offset * mean_offset, 0.0)


@njit(cache=True)
def _exact_moments(count, low, high, mode):
    """(E[y], Var[y]) by summing every term from the mode outward."""
    # offsets from the mode keep the second moment free of cancellation
    total = 1.0
    first = 0.0
    second = 0.0
    weight = 1.0
    y = mode
    while True:
        weight *= (low if y < count else high) / (y + 1.0)
        y += 1.0
        offset = y - mode
        total += weight
        first += offset * weight
        second += offset * offset * weight
        if weight < _TAIL_CUTOFF * total:
            break
    weight = 1.0
    y = mode
    while y > 0.0:
        weight *= y / (low if y - 1.0 < count else high)
        y -= 1.0
        offset = y - mode
        total += weight
        first += offset * weight
        second += offset * offset * weight
        if weight < _TAIL_CUTOFF * total:
            break
    mean_offset = first / total
    return mode + mean_offset, max(second / total - mean_offset * mean_offset, 0.0)


@njit(cache=True)
def posterior_count_moments(count, rate, alpha):
    """(E[y], Var[y]) of the true count given the noisy ``count`` and the
    Poisson ``rate`` of the true count, noise ratio ``alpha`` in (0, 1)."""
    if not rate > 0.0:
        return 0.0, 0.0
    if count <= 0.0:
        return rate * alpha, rate * alpha
    if rate == math.inf:
        return math.inf, 0.0
    mode = _mode(count, rate, alpha)
    if mode > _STRIDE_FROM:
        return _strided_moments(count, rate, alpha, mode)
    return _exact_moments(count, rate / alpha, rate * alpha, mode)


@njit(cache=True)
def posterior_count_mean(count, rate, alpha):
    """E[y] of the true count given the noisy ``count`` and the rate."""
    if count <= 0.0:
        return rate * alpha if rate > 0.0 else 0.0
    return posterior_count_moments(count, rate, alpha)[0]


@njit(cache=True)
def _general_mode(count, rate, alpha):
    if count <= 0.0:
        return math.floor(rate * alpha)
    return _mode(count, rate, alpha)


@njit(cache=True)
def draw_true_count(count, rate, alpha, uniform, second_uniform):
    """A draw of the true count given the noisy ``count`` and the rate.

    Exact inversion from the mode outward, in decreasing order of
    probability (a few steps: the law is unimodal with a standard deviation
    below sqrt(mode + 1)), for a mode up to ``_STRIDE_FROM``; above it, the
    nearest integer of a normal draw with the exact mean and variance (Box-
    Muller with the two uniforms), whose error there is far below the
    count's own noise, so that the work per entry stays bounded.
    """
    if not rate > 0.0:
        return 0.0
    if rate == math.inf:
        return math.inf
    low = rate / alpha
    high = rate * alpha
    mode = _general_mode(count, rate, alpha)
    if mode > _STRIDE_FROM:
        mean, var = posterior_count_moments(count, rate, alpha)
        normal = math.sqrt(-2.0 * math.log(1.0 - uniform)) * math.cos(
            2.0 * math.pi * second_uniform)
        return max(0.0, math.floor(mean + math.sqrt(var) * normal + 0.5))
    # the normaliser in units of the mode's term
    total = 1.0
    weight = 1.0
    y = mode
    while True:
        weight *= (low if y < count else high) / (y + 1.0)
        y += 1.0
        total += weight
        if weight < _TAIL_CUTOFF * total:
            break
    weight = 1.0
    y = mode
    while y > 0.0:
        weight *= y / (low if y - 1.0 < count else high)
        y -= 1.0
        total += weight
        if weight < _TAIL_CUTOFF * total:
            break
    target = uniform * total
    cumulative = 1.0
    if cumulative > target:
        return mode
    up = mode
    down = mode
    next_up = (low if up < count else high) / (up + 1.0)
    next_down = down / (low if down - 1.0 < count else high) if down > 0.0 else 0.0
    while True:
        if next_up >= next_down:
            up += 1.0
            cumulative += next_up
            if cumulative > target:
                return up
            next_up *= (low if up < count else high) / (up + 1.0)
        else:
            down -= 1.0
            cumulative += next_down
            if cumulative > target:
                return down
            next_down = (next_down * down / (low if down - 1.0 < count else high)
                         if down > 0.0 else 0.0)
        if next_up < 1e-300 and next_down <= 0.0:
            # the target fell in the dropped tail (probability ~1e-17)
            return up
