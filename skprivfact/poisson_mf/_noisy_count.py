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


# positive_count_sums takes the entries whose terms stay below
# exp(_LANE_MAX_LOW) relative to y = 0 (no overflow); the rest, and any sum not
# ended within _LANE_MAX_TERMS terms, are left to the scalar functions.
_LANE_MAX_LOW = 64.0
_LANE_MAX_TERMS = 96
# Terms added between two passes that retire the sums which have ended.
_LANE_TERMS_PER_CHECK = 8
# A sum ends once a bound on the rest of its terms is below this fraction of
# its total; terms below _LANE_FLUSH are set to 0, so that lanes whose sums
# have ended but not yet been retired do not go on into subnormal numbers
# (slow on x86).
_LANE_TAIL_CUTOFF = 1e-14
_LANE_FLUSH = 1e-280
# rows of the float scratch of positive_count_sums
N_LANE_BUFFERS = 9


@njit(cache=True, error_model="numpy")
def positive_count_sums(counts, rates, alpha, lanes, columns):
    """The sums behind E[y | k, r] and P(k | r) for the entries of a row with
    a positive noisy count, side by side.

    With the terms in units of the one at y = 0, w_y = (r / alpha)**y / y!
    for y <= k and w_k (r alpha)**(y - k) k! / y! above, so that
    E[y] = sum y w_y / sum w_y and P(k) = (1 - alpha) / (1 + alpha)
    alpha**k e**-r sum w_y. Term y of every sum is added in one pass over
    the lanes (SIMD code: one reciprocal per pass, no division or branch per
    entry). The ratios of the terms fall (the law is log-concave); once the
    next one, q, is below 1, the rest of a sum is below w_y q / (1 - q), and
    the sum ends when that is below ``_LANE_TAIL_CUTOFF`` of its total.
    Which entries are positive, and when their sums end, is random: every
    pass is branch-free.

    ``lanes`` is (N_LANE_BUFFERS, n) float scratch and ``columns`` (3, n)
    integer. Returns ``(n_ended, n_scalar)``: the sums of the entries
    ``columns[1, :n_ended]`` are ``lanes[6, :n_ended]`` (sum y w_y) and
    ``lanes[7, :n_ended]`` (sum w_y); the positive entries
    ``columns[2, :n_scalar]``, with their rates in ``lanes[8, :n_scalar]``,
    are left to the scalar functions.
    """
    n = counts.shape[0]
    lane_count = lanes[0]
    lane_low = lanes[1]
    lane_high = lanes[2]
    lane_term = lanes[3]
    lane_total = lanes[4]
    lane_first = lanes[5]
    ended_first = lanes[6]
    ended_total = lanes[7]
    scalar_rate = lanes[8]
    lane_column = columns[0]
    ended_column = columns[1]
    scalar_column = columns[2]
    n_lanes = 0
    n_scalar = 0
    for v in range(n):
        count = float(counts[v])
        rate = float(rates[v])
        positive = count > 0.0
        in_lanes = positive & (rate > 0.0) & (rate <= _LANE_MAX_LOW * alpha)
        # stored whatever the entry, kept by advancing the count
        lane_column[n_lanes] = v
        lane_count[n_lanes] = count
        lane_high[n_lanes] = rate
        n_lanes += in_lanes
        scalar_column[n_scalar] = v
        scalar_rate[n_scalar] = rate
        n_scalar += positive ^ in_lanes
    for j in range(n_lanes):
        rate = lane_high[j]
        lane_low[j] = rate / alpha
        lane_high[j] = rate * alpha
        lane_term[j] = 1.0
        lane_total[j] = 1.0
        lane_first[j] = 0.0
    n_ended = 0
    y = 0.0
    while n_lanes > 0 and y < _LANE_MAX_TERMS:
        for _ in range(_LANE_TERMS_PER_CHECK):
            inv_next = 1.0 / (y + 1.0)
            for j in range(n_lanes):
                # both factors loaded: a select between values, not loads
                low = lane_low[j]
                high = lane_high[j]
                factor = low if y < lane_count[j] else high
                term = lane_term[j] * (factor * inv_next)
                term = term if term > _LANE_FLUSH else 0.0
                lane_term[j] = term
                lane_total[j] += term
                lane_first[j] += (y + 1.0) * term
            y += 1.0
        # the ended sums leave the lanes, the others move up
        n_kept = 0
        for j in range(n_lanes):
            low = lane_low[j]
            high = lane_high[j]
            count = lane_count[j]
            next_factor = low if y < count else high
            term = lane_term[j]
            total = lane_total[j]
            first = lane_first[j]
            column = lane_column[j]
            # false while the ratio is at least 1 (the right side is not positive)
            ended = term * next_factor < _LANE_TAIL_CUTOFF * total * (y + 1.0 - next_factor)
            ended_column[n_ended] = column
            ended_first[n_ended] = first
            ended_total[n_ended] = total
            n_ended += ended
            lane_column[n_kept] = column
            lane_count[n_kept] = count
            lane_low[n_kept] = low
            lane_high[n_kept] = high
            lane_term[n_kept] = term
            lane_total[n_kept] = total
            lane_first[n_kept] = first
            n_kept += not ended
        n_lanes = n_kept
    # sums not ended within _LANE_MAX_TERMS terms join the scalar entries
    for j in range(n_lanes):
        scalar_column[n_scalar] = lane_column[j]
        scalar_rate[n_scalar] = lane_high[j] / alpha
        n_scalar += 1
    return n_ended, n_scalar
