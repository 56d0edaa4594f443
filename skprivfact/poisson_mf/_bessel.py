"""The Bessel distribution: mode, log-pmf, mean and an exact sampler (numba).

Bessel(nu, a) on m = 0, 1, 2, ... has

    P(m) = (a/2)**(2m + nu) / (m! Gamma(m + nu + 1) I_nu(a)),

with I_nu the modified Bessel function of the first kind. It is the law of
min(y+, g-) given y+ - g- in the Poisson augmentation of two-sided geometric
noise (Schein et al. 2019). The pmf is discrete log-concave: the ratio
P(m + 1) / P(m) = (a/2)**2 / ((m + 1)(m + nu + 1)) decreases in m. All the
functions below work from the mode outward with that ratio, in units of the
mode's term, so nothing overflows for nu up to 1e5 and a up to 1e6 and the
normalising constant I_nu(a) is never evaluated directly.
"""

import math

import numpy as np
from numba import njit

# Terms below this fraction of the mode's term are dropped from a sum; the
# pmf is log-concave, so the rest of the tail is smaller still (the ratio of
# successive terms is below one and falling).
_TAIL_CUTOFF = 1e-20


@njit(cache=True)
def bessel_mode(nu, a):
    """Mode of Bessel(nu, a): floor((sqrt(a**2 + nu**2) - nu) / 2).

    Computed as the largest m with m (m + nu) <= (a/2)**2, which is the same
    number without the cancellation of sqrt(a**2 + nu**2) - nu when a << nu.
    """
    if a <= 0.0:
        return 0.0
    return _mode(nu, 0.25 * a * a)


@njit(cache=True)
def _mode(nu, half_a_sq):
    """``bessel_mode`` from (a/2)**2 > 0."""
    # (sqrt(a^2 + nu^2) - nu) / 2 == (a^2 / 4) / ((sqrt(a^2 + nu^2) + nu) / 2)
    guess = math.floor(half_a_sq / (0.5 * (math.sqrt(4.0 * half_a_sq + nu * nu) + nu)))
    if guess < 0.0:
        guess = 0.0
    # One integer step either way repairs rounding of the closed form.
    while guess > 0.0 and guess * (guess + nu) > half_a_sq:
        guess -= 1.0
    while (guess + 1.0) * (guess + 1.0 + nu) <= half_a_sq:
        guess += 1.0
    return guess


@njit(cache=True)
def _log_mode_term(mode, nu, a):
    # log of (a/2)^(2m+nu) / (m! Gamma(m+nu+1)) at m = mode
    return (
        (2.0 * mode + nu) * math.log(0.5 * a)
        - math.lgamma(mode + 1.0)
        - math.lgamma(mode + nu + 1.0)
    )


@njit(cache=True)
def _relative_sums(nu, half_a_sq, mode):
    """Sums of w(m) and m w(m) over the support, w(m) = P(m) / P(mode)."""
    total = 1.0
    first_moment = mode
    # upward: w(m+1) = w(m) (a/2)^2 / ((m+1)(m+nu+1))
    weight = 1.0
    m = mode
    while True:
        weight *= half_a_sq / ((m + 1.0) * (m + nu + 1.0))
        m += 1.0
        total += weight
        first_moment += m * weight
        if weight < _TAIL_CUTOFF * total:
            break
    # downward: w(m-1) = w(m) m (m+nu) / (a/2)^2
    weight = 1.0
    m = mode
    while m > 0.0:
        weight *= m * (m + nu) / half_a_sq
        m -= 1.0
        total += weight
        first_moment += m * weight
        if weight < _TAIL_CUTOFF * total:
            break
    return total, first_moment


@njit(cache=True)
def bessel_log_normalizer(nu, a):
    """log I_nu(a), by summing the series from its largest term outward."""
    if a <= 0.0:
        return 0.0 if nu == 0.0 else -np.inf
    mode = bessel_mode(nu, a)
    total, _ = _relative_sums(nu, 0.25 * a * a, mode)
    return _log_mode_term(mode, nu, a) + math.log(total)


@njit(cache=True)
def bessel_logpmf(m, nu, a):
    """log P(m) under Bessel(nu, a); -inf outside the support."""
    if m < 0.0 or m != math.floor(m):
        return -np.inf
    if a <= 0.0:
        return 0.0 if m == 0.0 else -np.inf
    log_term = (
        (2.0 * m + nu) * math.log(0.5 * a)
        - math.lgamma(m + 1.0)
        - math.lgamma(m + nu + 1.0)
    )
    return log_term - bessel_log_normalizer(nu, a)


@njit(cache=True)
def bessel_mean(nu, a):
    """Mean of Bessel(nu, a), (a/2) I_{nu+1}(a) / I_nu(a)."""
    if a <= 0.0:
        return 0.0
    half_a_sq = 0.25 * a * a
    if half_a_sq < nu + 1.0:
        # Mode 0 (w(1) < w(0)), the usual case: one upward pass, the same
        # sums as _relative_sums(nu, half_a_sq, 0) without locating the mode.
        total = 1.0
        first_moment = 0.0
        weight = 1.0
        m = 0.0
        while True:
            weight *= half_a_sq / ((m + 1.0) * (m + nu + 1.0))
            m += 1.0
            total += weight
            first_moment += m * weight
            if weight < _TAIL_CUTOFF * total:
                break
        return first_moment / total
    mode = bessel_mode(nu, a)
    total, first_moment = _relative_sums(nu, half_a_sq, mode)
    return first_moment / total


@njit(cache=True)
def _inverse_from_normalizer(nu, half_a_sq, mode, uniform):
    """The inversion of ``bessel_draw`` with the normalising sum taken first
    (exact up to the dropped tail of relative size 1e-20)."""
    total, _ = _relative_sums(nu, half_a_sq, mode)
    target = uniform * total
    cumulative = 1.0
    if cumulative > target:
        return mode
    up_m = mode
    down_m = mode
    next_up = half_a_sq / ((up_m + 1.0) * (up_m + nu + 1.0))
    next_down = down_m * (down_m + nu) / half_a_sq if down_m > 0.0 else 0.0
    while True:
        if next_up >= next_down:
            up_m += 1.0
            cumulative += next_up
            if cumulative > target:
                return up_m
            next_up *= half_a_sq / ((up_m + 1.0) * (up_m + nu + 1.0))
        else:
            down_m -= 1.0
            cumulative += next_down
            if cumulative > target:
                return down_m
            next_down = next_down * down_m * (down_m + nu) / half_a_sq if down_m > 0.0 else 0.0
        if next_up <= 0.0 and next_down <= 0.0:
            # target fell in the dropped tail (probability ~1e-20): the
            # largest remaining candidate is the nearest support point.
            return up_m


@njit(cache=True)
def bessel_draw(nu, half_a_sq, uniform):
    """The exact draw from Bessel(nu, a) that a ``uniform`` on [0, 1) maps
    to, given ``half_a_sq`` = (a/2)**2.

    Inversion in the order mode, then outward, always taking the larger of
    the next term above and the next term below (the pmf is unimodal, so this
    visits the support in decreasing order of probability and stops after
    O(standard deviation) steps on average). The normalising sum is not
    needed to decide most draws: a point is the draw when its cumulative
    weight C exceeds ``uniform`` times C plus an upper bound of the mass not
    yet visited, and is not when C is at most ``uniform`` times C plus the
    next two terms. The upper bound is each side's next term over one minus
    its following ratio, as the ratios of successive terms keep falling away
    from the mode. Only a draw the bounds leave undecided (rare, except in
    the bulk of the large-a regime) sums the normaliser first.
    """
    if not 0.0 < half_a_sq < math.inf:
        # a = 0 (and, defensively, NaN or inf: the walk would not end)
        return 0.0
    if half_a_sq < nu + 1.0:
        # mode 0 (w(1) < w(0)), the usual case; the test for a draw of 0,
        # 1 > uniform (1 + w(1) / (1 - w(2) / w(1))), without divisions
        den = (nu + 1.0) * (2.0 * nu + 4.0 - half_a_sq)
        if den > uniform * (den + half_a_sq * (2.0 * nu + 4.0)):
            return 0.0
        mode = 0.0
    else:
        mode = _mode(nu, half_a_sq)
    # weights in units of the mode's term
    cumulative = 1.0
    m = mode
    up_m = mode
    down_m = mode
    next_up = half_a_sq / ((up_m + 1.0) * (up_m + nu + 1.0))
    next_down = down_m * (down_m + nu) / half_a_sq if down_m > 0.0 else 0.0
    while True:
        # the following ratios are below one: (m + 1)(m + 1 + nu) > (a/2)^2
        # above the mode, m (m + nu) <= (a/2)^2 at and below it
        rest_high = next_up / (1.0 - half_a_sq / ((up_m + 2.0) * (up_m + nu + 2.0)))
        if next_down > 0.0:
            rest_high += next_down / (1.0 - (down_m - 1.0) * (down_m - 1.0 + nu) / half_a_sq)
        if cumulative > uniform * (cumulative + rest_high):
            return m
        if cumulative > uniform * (cumulative + next_up + next_down):
            return _inverse_from_normalizer(nu, half_a_sq, mode, uniform)
        if next_up >= next_down:
            up_m += 1.0
            m = up_m
            cumulative += next_up
            next_up *= half_a_sq / ((up_m + 1.0) * (up_m + nu + 1.0))
        else:
            down_m -= 1.0
            m = down_m
            cumulative += next_down
            next_down = next_down * down_m * (down_m + nu) / half_a_sq if down_m > 0.0 else 0.0


@njit(cache=True)
def bessel_sample(nu, a):
    """One exact draw from Bessel(nu, a), using numba's ``np.random`` state."""
    return bessel_draw(nu, 0.25 * a * a if a > 0.0 else 0.0, np.random.random())


@njit(cache=True)
def bessel_sample_many(nu, a, n_draws, seed):
    """``n_draws`` draws from Bessel(nu, a) with numba's generator seeded by ``seed``."""
    np.random.seed(seed)
    draws = np.empty(n_draws, dtype=np.float64)
    for i in range(n_draws):
        draws[i] = bessel_sample(nu, a)
    return draws
