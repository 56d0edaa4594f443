"""The privacy accountant every skprivfact estimator uses.

Central-DP estimators release Gaussian-noised statistics of Poisson-subsampled
batches. Their privacy is tracked here with Renyi differential privacy (RDP):
the RDP of the Poisson-subsampled Gaussian mechanism (Mironov, Talwar and Zhang,
2019) at a grid of orders, composed over steps by addition, and converted to
(epsilon, delta) with the conversion of Canonne, Kamath and Steinke (2020) and
Balle et al. (2020), which is tighter than the classical one. No estimator
computes its own epsilon.

For the local two-sided geometric mechanism the guarantee is pure epsilon;
:func:`geometric_alpha` and :func:`geometric_epsilon` convert between epsilon
and the noise parameter alpha.

Notes
-----
Fractional orders use the signed two-sided series of Mironov et al. (2019,
section 3.3), which equals the RDP exactly. (Summing the absolute values of its
terms, as some libraries do, gives a valid but loose upper bound.) Where the
signed sum would lose more than half of its digits to cancellation the absolute
sum is used instead, and a small allowance for rounding is added in every case,
so the reported RDP is never below the exact value by more than a negligible
rounding error. An order whose series does not converge is dropped, which only
makes the minimum over orders larger.
"""

import functools
import math
from numbers import Integral, Real

import numpy as np
from scipy import special

from .utils._validation import check_non_negative_number, check_privacy_params

__all__ = [
    "DEFAULT_ORDERS",
    "NEIGHBOURING_RELATIONS",
    "RDPAccountant",
    "PLDAccountant",
    "make_accountant",
    "compute_rdp",
    "rdp_to_epsilon",
    "calibrate_noise_multiplier",
    "geometric_alpha",
    "geometric_epsilon",
]

DEFAULT_ORDERS = np.unique(
    np.round(
        np.concatenate(
            [
                1.0 + np.arange(2, 50) / 50.0,  # 1.04 .. 1.98: large-epsilon regime
                2.0 + np.arange(0, 91) / 10.0,  # 2.0 .. 11.0
                np.arange(12, 257, dtype=float),
                np.arange(288, 1025, 32, dtype=float),
                [1280.0, 1536.0, 2048.0, 3072.0, 4096.0, 6144.0, 8192.0],
            ]
        ),
        12,
    )
)
DEFAULT_ORDERS.setflags(write=False)

# The two neighbouring relations an epsilon can be stated for: adding or
# removing one record, or replacing one record by another (the number of
# records is then public).
NEIGHBOURING_RELATIONS = ("add_remove", "substitution")

# Substitution RDP is computed by quadrature on a grid of this many points per
# noise standard deviation; the integrand is analytic, so the trapezoid rule's
# error is far below the allowance added to the result.
_SUBSTITUTION_POINTS_PER_STD = 8
_SUBSTITUTION_TAIL_STDS = 14.0
# At most this many grid points per order (16 MB an array): beyond, the noise
# std is below about 0.01 of the sensitivity and the order is left infinite.
_SUBSTITUTION_MAX_POINTS = 2_000_000
# Quadrature costs time per order, so substitution RDP is evaluated on this
# coarser subset of the orders (others count as infinite, which only makes the
# minimum over orders larger).
_SUBSTITUTION_ORDERS = frozenset(
    np.round(
        np.concatenate(
            [
                1.0 + np.arange(1, 10) / 10.0,
                2.0 + np.arange(0, 19) / 2.0,
                np.arange(12.0, 65.0),
                np.arange(80.0, 513.0, 16.0),
            ]
        ),
        12,
    ).tolist()
)
_SUBSTITUTION_LOG_ALLOWANCE = 1e-9

# The conversion to (epsilon, delta) is numerically unstable for orders this
# close to 1 (and useless there), as in dp-accounting.
_MIN_CONVERSION_ORDER = 1.01
# The fractional-order series is summed over at most this many terms; an
# order that has not converged by then is dropped.
_FIRST_TERMS = 256
_MAX_TERMS = 4096
# Terms below exp(-30) of the running total are negligible.
_CONVERGED_LOG_GAP = 30.0
# Allowance per summed term for floating-point rounding, relative to the sum of
# the absolute values of the terms.
_ROUNDING_PER_TERM = 4 * np.finfo(float).eps


def _log_erfc(x):
    # log(erfc(x)) without underflow for large x.
    return math.log(2.0) + special.log_ndtr(-x * math.sqrt(2.0))


def _check_orders(orders):
    if orders is None:
        return DEFAULT_ORDERS
    orders = np.asarray(orders, dtype=float).ravel()
    if orders.size == 0 or not np.all(np.isfinite(orders)) or np.any(orders <= 1):
        raise ValueError("orders must be a non-empty sequence of finite numbers > 1.")
    return np.unique(orders)


def _check_step(noise_multiplier, sample_rate, steps):
    noise_multiplier = check_non_negative_number(
        noise_multiplier, "noise_multiplier", allow_inf=True
    )
    if not (
        isinstance(sample_rate, Real)
        and not isinstance(sample_rate, bool)
        and 0 < sample_rate <= 1
    ):
        raise ValueError(
            f"sample_rate must lie in the interval (0, 1]; got {sample_rate!r}."
        )
    if not (isinstance(steps, Integral) and not isinstance(steps, bool) and steps >= 1):
        raise ValueError(f"steps must be an integer >= 1; got {steps!r}.")
    return float(noise_multiplier), float(sample_rate), int(steps)


def _log_a_integer(sample_rate, sigma, orders):
    """log A_alpha at integer orders, all orders in one vectorised pass.

    A_alpha = sum_k C(alpha, k) (1-q)^(alpha-k) q^k exp((k^2 - k) / (2 sigma^2)),
    a sum of positive terms.
    """
    orders = orders.astype(np.int64)
    lengths = orders + 1
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    # k runs over 0..alpha for every order, concatenated.
    k = (np.arange(lengths.sum()) - np.repeat(starts, lengths)).astype(float)
    alpha = np.repeat(orders, lengths).astype(float)
    log_terms = (
        special.gammaln(alpha + 1.0)
        - special.gammaln(k + 1.0)
        - special.gammaln(alpha - k + 1.0)
        + k * math.log(sample_rate)
        + (alpha - k) * math.log1p(-sample_rate)
        + (k * k - k) / (2.0 * sigma**2)
    )
    peak = np.maximum.reduceat(log_terms, starts)
    return peak + np.log(np.add.reduceat(np.exp(log_terms - np.repeat(peak, lengths)), starts))


def _fractional_terms(sample_rate, sigma, orders, n_terms):
    """Log-magnitudes and signs of both series' terms, shape (n_orders, n_terms)."""
    alpha = orders[:, None]
    i = np.arange(n_terms, dtype=float)[None, :]
    j = alpha - i
    # log |C(alpha, i)| and its sign: Gamma(j + 1) carries the sign since the
    # other two gamma functions have positive arguments.
    log_binom = special.gammaln(alpha + 1.0) - special.gammaln(i + 1.0) - special.gammaln(j + 1.0)
    sign = special.gammasgn(j + 1.0)
    z0 = sigma**2 * math.log(1.0 / sample_rate - 1.0) + 0.5
    log_q, log_1mq = math.log(sample_rate), math.log1p(-sample_rate)
    scale = math.sqrt(2.0) * sigma
    log_s0 = (
        log_binom
        + i * log_q
        + j * log_1mq
        + (i * i - i) / (2.0 * sigma**2)
        + math.log(0.5)
        + _log_erfc((i - z0) / scale)
    )
    log_s1 = (
        log_binom
        + j * log_q
        + i * log_1mq
        + (j * j - j) / (2.0 * sigma**2)
        + math.log(0.5)
        + _log_erfc((z0 - j) / scale)
    )
    return log_s0, log_s1, sign


def _sum_fractional(log_s0, log_s1, sign):
    """Signed sums of the converged series; NaN for orders not converged."""
    log_mag = np.logaddexp(log_s0, log_s1)
    running_total = np.logaddexp.accumulate(log_mag, axis=1)
    decreasing = np.zeros_like(log_mag, dtype=bool)
    decreasing[:, 1:] = (log_s0[:, 1:] < log_s0[:, :-1]) & (log_s1[:, 1:] < log_s1[:, :-1])
    converged = decreasing & (
        np.maximum(log_s0, log_s1) < running_total - _CONVERGED_LOG_GAP
    )
    has_converged = converged.any(axis=1)
    last = np.where(has_converged, converged.argmax(axis=1), log_mag.shape[1] - 1)
    used = np.arange(log_mag.shape[1])[None, :] <= last[:, None]

    masked = np.where(used, log_mag, -np.inf)
    log_pos = special.logsumexp(np.where(sign > 0, masked, -np.inf), axis=1)
    log_neg = special.logsumexp(np.where(sign < 0, masked, -np.inf), axis=1)
    ratio = np.exp(log_neg - log_pos)  # N / P, in [0, 1) when the sum is positive
    allowance = (last + 1) * _ROUNDING_PER_TERM * (1.0 + ratio)
    with np.errstate(divide="ignore", invalid="ignore"):
        # Signed sum P - N plus a rounding allowance, or, where more than half
        # of the digits cancel, the absolute sum P + N: an upper bound either way.
        log_a = np.where(
            1.0 - ratio > 1e-8,
            log_pos + np.log1p(-ratio + allowance),
            log_pos + np.log1p(ratio),
        )
    return np.where(has_converged, log_a, np.nan)


def _log_a_fractional(sample_rate, sigma, orders):
    log_a = _sum_fractional(*_fractional_terms(sample_rate, sigma, orders, _FIRST_TERMS))
    retry = np.isnan(log_a)
    if retry.any():
        log_a[retry] = _sum_fractional(
            *_fractional_terms(sample_rate, sigma, orders[retry], _MAX_TERMS)
        )
    # An order whose series has not converged is dropped (infinite RDP).
    return np.where(np.isnan(log_a), np.inf, log_a)


def _rdp_one_step(noise_multiplier, sample_rate, orders):
    if noise_multiplier == 0:
        return np.full(orders.shape, np.inf)
    if math.isinf(noise_multiplier):
        return np.zeros(orders.shape)
    if sample_rate == 1.0:
        # The Gaussian mechanism: exact at every order.
        return orders / (2.0 * noise_multiplier**2)
    log_a = np.empty(orders.shape)
    is_integer = orders == np.floor(orders)
    if is_integer.any():
        log_a[is_integer] = _log_a_integer(sample_rate, noise_multiplier, orders[is_integer])
    if not is_integer.all():
        log_a[~is_integer] = _log_a_fractional(
            sample_rate, noise_multiplier, orders[~is_integer]
        )
    # A_alpha >= 1 in exact arithmetic; a rounding error below 0 is not a gain.
    return np.maximum(log_a, 0.0) / (orders - 1.0)


def _rdp_substitution_one_step(noise_multiplier, sample_rate, orders):
    """RDP of one Poisson-subsampled Gaussian release under substitution.

    Replacing one record moves its clipped contribution (norm at most 1 in
    units of the sensitivity) from ``+u`` to ``-u``; projected on ``u`` the two
    output laws are ``P = (1 - q) N(0, s^2) + q N(1, s^2)`` and
    ``Q = (1 - q) N(0, s^2) + q N(-1, s^2)``, the pair dp-accounting's
    ``REPLACE_ONE`` relation uses. By symmetry ``D_a(P||Q) = D_a(Q||P)``; it is
    ``log int P^a Q^(1-a) dx / (a - 1)``, computed by the trapezoid rule in log
    space over the whole region holding the integrand's mass (it peaks near
    ``x = 2a - 1``), plus a small allowance for rounding. With ``q = 1`` it is
    the Gaussian mechanism of sensitivity 2, ``2 a / s^2``, exactly. Orders
    outside a coarse subset of at most 512 are dropped (infinite): the minimum
    over orders is then at most a few percent larger.
    """
    sigma = noise_multiplier
    if sample_rate == 1.0:
        return 2.0 * orders / sigma**2
    rdp = np.full(orders.shape, np.inf)
    log_q, log_1mq = math.log(sample_rate), math.log1p(-sample_rate)
    step = sigma / _SUBSTITUTION_POINTS_PER_STD
    for i, order in enumerate(orders):
        if round(float(order), 12) not in _SUBSTITUTION_ORDERS:
            continue
        low = -1.0 - _SUBSTITUTION_TAIL_STDS * sigma
        high = 2.0 * order + 1.0 + _SUBSTITUTION_TAIL_STDS * sigma
        if (high - low) / step > _SUBSTITUTION_MAX_POINTS:
            # A noise std far below the sensitivity: the grid would not fit in
            # memory, and the divergence is huge. Infinite (no bound from this
            # order) is safe: the minimum over orders only loses it.
            continue
        x = np.arange(low, high + step, step)
        log_centre = log_1mq - x * x / (2.0 * sigma**2)
        log_p = np.logaddexp(log_centre, log_q - (x - 1.0) ** 2 / (2.0 * sigma**2))
        log_q_density = np.logaddexp(
            log_centre, log_q - (x + 1.0) ** 2 / (2.0 * sigma**2)
        )
        # The Gaussian normalisers cancel: a + (1 - a) = 1.
        log_integrand = order * log_p + (1.0 - order) * log_q_density
        log_integral = (
            special.logsumexp(log_integrand)
            + math.log(step)
            - 0.5 * math.log(2.0 * math.pi * sigma**2)
        )
        # Rounding of log-integrands of large magnitude: relative allowance.
        allowance = _SUBSTITUTION_LOG_ALLOWANCE + 1e-13 * np.abs(log_integrand).max()
        rdp[i] = max(log_integral + allowance, 0.0) / (order - 1.0)
    return rdp


def _check_relation(neighbouring_relation):
    if neighbouring_relation not in NEIGHBOURING_RELATIONS:
        raise ValueError(
            f"neighbouring_relation must be one of {NEIGHBOURING_RELATIONS}; got "
            f"{neighbouring_relation!r}."
        )
    return neighbouring_relation


@functools.lru_cache(maxsize=512)
def _cached_rdp_one_step(noise_multiplier, sample_rate, orders_key, relation="add_remove"):
    orders = np.array(orders_key)
    if relation == "substitution" and 0 < noise_multiplier < math.inf:
        rdp = _rdp_substitution_one_step(noise_multiplier, sample_rate, orders)
    else:
        rdp = _rdp_one_step(noise_multiplier, sample_rate, orders)
    rdp.setflags(write=False)
    return rdp


def compute_rdp(
    noise_multiplier,
    sample_rate=1.0,
    steps=1,
    orders=None,
    *,
    neighbouring_relation="add_remove",
):
    """Renyi DP of the Poisson-subsampled Gaussian mechanism, composed over steps.

    Each step releases a sum over a batch in which every record is included
    independently with probability ``sample_rate``, plus Gaussian noise with
    standard deviation ``noise_multiplier`` times the sum's L2 sensitivity.
    Neighbouring datasets differ by adding or removing one record, or by
    replacing one (``neighbouring_relation``).

    Parameters
    ----------
    noise_multiplier : float
        Ratio of the noise standard deviation to the L2 sensitivity. Zero means
        no noise (infinite RDP).
    sample_rate : float, default=1.0
        Poisson sampling rate q in (0, 1]. With q = 1 the value is exact:
        ``order / (2 noise_multiplier**2)`` per step.
    steps : int, default=1
        Number of identical steps composed.
    orders : array-like of float, default=None
        Renyi orders (> 1); :data:`DEFAULT_ORDERS` when None.
    neighbouring_relation : {"add_remove", "substitution"}, default="add_remove"
        Whether neighbouring datasets differ by adding or removing one record,
        or by replacing one (the Renyi divergence between the mixtures
        ``(1 - q) N(0, s^2) + q N(+-1, s^2)``, computed numerically).

    Returns
    -------
    rdp : ndarray of shape (n_orders,)
        RDP at each order (``np.inf`` where a series did not converge).

    Examples
    --------
    >>> from skprivfact.accounting import compute_rdp
    >>> float(compute_rdp(2.0, orders=[2.0])[0])  # 2 / (2 * 2**2)
    0.25
    """
    noise_multiplier, sample_rate, steps = _check_step(noise_multiplier, sample_rate, steps)
    orders = _check_orders(orders)
    relation = _check_relation(neighbouring_relation)
    return steps * _cached_rdp_one_step(
        noise_multiplier, sample_rate, tuple(orders.tolist()), relation
    )


def rdp_to_epsilon(orders, rdp, delta):
    """Convert RDP at several orders to (epsilon, delta)-DP.

    Uses, at each order ``a``, the conversion of Canonne, Kamath and Steinke
    (2020, Proposition 12) and Balle et al. (2020, Theorem 21)::

        epsilon(a) = rdp(a) + log((a - 1) / a) - (log(delta) + log(a)) / (a - 1)

    and returns the smallest over the orders. Where ``delta`` is at least the
    total-variation bound ``sqrt(1 - exp(-rdp(a)))``, epsilon is 0. Orders
    below 1.01 are skipped (the conversion is unstable there).

    Parameters
    ----------
    orders : array-like of shape (n_orders,)
        Renyi orders, all > 1.
    rdp : array-like of shape (n_orders,)
        RDP at those orders, non-negative (``np.inf`` allowed).
    delta : float
        Target delta in (0, 1).

    Returns
    -------
    epsilon : float
        The smallest epsilon over the orders (``np.inf`` if none is usable).
    best_order : float
        The order that attains it.

    Examples
    --------
    >>> from skprivfact.accounting import compute_rdp, rdp_to_epsilon, DEFAULT_ORDERS
    >>> eps, order = rdp_to_epsilon(DEFAULT_ORDERS, compute_rdp(5.0), 1e-5)
    >>> round(eps, 3)
    0.795
    """
    check_privacy_params(delta=delta)
    orders = np.asarray(orders, dtype=float).ravel()
    rdp = np.asarray(rdp, dtype=float).ravel()
    if orders.shape != rdp.shape or orders.size == 0:
        raise ValueError(
            "orders and rdp must be non-empty and of the same length; got "
            f"{orders.size} and {rdp.size}."
        )
    if np.any(orders <= 1) or np.isnan(orders).any():
        raise ValueError("Renyi orders must be > 1.")
    if np.any(rdp < 0) or np.isnan(rdp).any():
        raise ValueError("RDP values must be non-negative.")
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        eps = (
            rdp
            + np.log1p(-1.0 / orders)
            - (math.log(delta) + np.log(orders)) / (orders - 1.0)
        )
        eps = np.where(orders > _MIN_CONVERSION_ORDER, eps, np.inf)
        eps = np.where(np.isinf(rdp), np.inf, eps)
        # Total variation: delta >= sqrt(1 - exp(-KL)) and KL <= rdp(a).
        eps = np.where(delta**2 + np.expm1(-rdp) > 0, 0.0, eps)
    best = int(np.argmin(eps))
    return max(0.0, float(eps[best])), float(orders[best])


class _Accountant:
    """What both accountants share: the record of steps, copies and their repr."""

    @property
    def history(self):
        """Steps composed so far, as (noise_multiplier, sample_rate, steps) runs."""
        return list(self._history)

    @property
    def steps(self):
        """Total number of releases composed."""
        return sum(steps for _, _, steps in self._history)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __repr__(self):
        # Consecutive alike steps as one run: a fit's history of a release
        # per step would print thousands of tuples.
        runs = []
        for noise_multiplier, sample_rate, steps in self._history:
            if runs and runs[-1][:2] == (noise_multiplier, sample_rate):
                steps += runs.pop()[2]
            runs.append((noise_multiplier, sample_rate, steps))
        return (
            f"{type(self).__name__}(neighbouring_relation="
            f"{self.neighbouring_relation!r}, steps={self.steps}, "
            f"history={runs!r})"
        )


class RDPAccountant(_Accountant):
    """Renyi-DP accountant for Poisson-subsampled Gaussian releases.

    Records every composition step, so that a fit continued with
    ``partial_fit`` keeps spending from the same accountant, and converts the
    composed RDP to (epsilon, delta) on demand with :func:`rdp_to_epsilon`.
    The accountant is a plain object: it can be copied and pickled.

    Parameters
    ----------
    orders : array-like of float, default=None
        Renyi orders (> 1) at which RDP is tracked; :data:`DEFAULT_ORDERS`
        (a superset of dp-accounting's default grid, finer at fractional
        orders and extending to 8192) when None.
    neighbouring_relation : {"add_remove", "substitution"}, default="add_remove"
        The relation the epsilon holds for: adding or removing one record, or
        replacing one record by another.

    Attributes
    ----------
    orders : ndarray of shape (n_orders,)
        The Renyi orders tracked.
    neighbouring_relation : str
        The relation the epsilon holds for.

    See Also
    --------
    calibrate_noise_multiplier : Noise needed for a target epsilon.

    Examples
    --------
    >>> from skprivfact.accounting import RDPAccountant
    >>> accountant = RDPAccountant().compose(1.1, sample_rate=0.01, steps=1000)
    >>> round(accountant.get_epsilon(1e-5), 2)
    1.71
    >>> accountant.history
    [(1.1, 0.01, 1000)]
    """

    kind = "rdp"

    def __init__(self, orders=None, neighbouring_relation="add_remove"):
        self.orders = _check_orders(orders)
        self.neighbouring_relation = _check_relation(neighbouring_relation)
        self._history = []
        # Kept up to date by compose, so that get_epsilon costs the same after
        # one step or after thousands of partial_fit calls.
        self._total_rdp = np.zeros(self.orders.shape)

    def compose(self, noise_multiplier, sample_rate=1.0, steps=1):
        """Record ``steps`` releases of the Poisson-subsampled Gaussian mechanism.

        Parameters
        ----------
        noise_multiplier : float
            Noise standard deviation divided by the L2 sensitivity of the
            release (for several blocks released together, the multiplier of
            the stacked, rescaled vector: see
            :func:`skprivfact.mechanisms.gaussian_mechanism`). Zero means no
            noise: epsilon becomes infinite.
        sample_rate : float, default=1.0
            Poisson sampling rate in (0, 1] (1 for full-batch releases).
        steps : int, default=1
            Number of such releases.

        Returns
        -------
        self : RDPAccountant
            The accountant, for chaining.
        """
        noise_multiplier, sample_rate, steps = _check_step(
            noise_multiplier, sample_rate, steps
        )
        step_rdp = _cached_rdp_one_step(
            noise_multiplier,
            sample_rate,
            tuple(self.orders.tolist()),
            self.neighbouring_relation,
        )
        self._total_rdp = self._total_rdp + steps * step_rdp
        self._history.append((noise_multiplier, sample_rate, steps))
        return self

    @property
    def rdp(self):
        """Composed RDP at each order, an ndarray of shape (n_orders,)."""
        return self._total_rdp.copy()

    def get_privacy_spent(self, delta):
        """Epsilon spent at ``delta``, and the Renyi order attaining it.

        Parameters
        ----------
        delta : float
            Target delta in (0, 1).

        Returns
        -------
        epsilon : float
            The epsilon spent (0 when nothing was composed).
        best_order : float
            The Renyi order of the conversion (NaN when nothing was composed).
        """
        check_privacy_params(delta=delta)
        if not self._history:
            return 0.0, float("nan")
        return rdp_to_epsilon(self.orders, self._total_rdp, delta)

    def get_epsilon(self, delta):
        """Epsilon spent at ``delta``.

        Parameters
        ----------
        delta : float
            Target delta in (0, 1).

        Returns
        -------
        epsilon : float
            The epsilon spent: never below the true epsilon of the composed
            mechanism.
        """
        return self.get_privacy_spent(delta)[0]

    def copy(self):
        """Return an independent copy (history and orders).

        Returns
        -------
        accountant : RDPAccountant
            The copy.
        """
        new = RDPAccountant.__new__(RDPAccountant)
        new.orders = self.orders
        new.neighbouring_relation = self.neighbouring_relation
        new._history = list(self._history)
        new._total_rdp = self._total_rdp.copy()
        return new



def _import_dp_accounting():
    try:
        import dp_accounting  # noqa: F401
        from dp_accounting.pld import pld_privacy_accountant
    except ImportError as exc:
        raise ImportError(
            'accountant="pld" needs the dp-accounting package: pip install '
            '"skprivfact[pld]" (or pip install dp-accounting).'
        ) from exc
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)
    return dp_accounting, pld_privacy_accountant


class PLDAccountant(_Accountant):
    """Tight accountant: privacy loss distributions, from dp-accounting.

    The same interface as :class:`RDPAccountant`; the epsilon is the one
    Google's ``dp-accounting`` computes from the composed privacy loss
    distribution with pessimistic rounding (an upper bound on the true
    epsilon, larger by at most its discretisation error). Steps are recorded
    as runs of identical releases and the distribution is composed when an
    epsilon is asked for, so recording a step costs nothing.

    Parameters
    ----------
    neighbouring_relation : {"add_remove", "substitution"}, default="add_remove"
        The relation the epsilon holds for (dp-accounting's
        ``ADD_OR_REMOVE_ONE`` or ``REPLACE_ONE``).
    value_discretization_interval : float or None, default=None
        Width of the privacy-loss grid; smaller is tighter and slower. None
        takes 1e-3, or about ``1e-4`` times the epsilon when that is larger
        (from a first, coarser bound): the grid's cost grows with the epsilon
        over the width, so a fixed width would take minutes at epsilons in
        the thousands, while the rounding it adds stays a small share of the
        epsilon. Beyond a Renyi-DP epsilon of 1e6 that epsilon (also an upper
        bound) is returned instead.

    Attributes
    ----------
    neighbouring_relation : str
        The relation the epsilon holds for.

    Examples
    --------
    >>> from skprivfact.accounting import PLDAccountant, RDPAccountant
    >>> pld = PLDAccountant().compose(1.1, sample_rate=0.01, steps=1000)
    >>> rdp = RDPAccountant().compose(1.1, sample_rate=0.01, steps=1000)
    >>> pld.get_epsilon(1e-5) < rdp.get_epsilon(1e-5)
    True
    """

    kind = "pld"

    def __init__(self, neighbouring_relation="add_remove", value_discretization_interval=None):
        _import_dp_accounting()
        self.neighbouring_relation = _check_relation(neighbouring_relation)
        if value_discretization_interval is not None:
            if not (
                isinstance(value_discretization_interval, Real)
                and 0 < value_discretization_interval < math.inf
            ):
                raise ValueError(
                    "value_discretization_interval must be a positive finite number "
                    f"or None; got {value_discretization_interval!r}."
                )
            value_discretization_interval = float(value_discretization_interval)
        self.value_discretization_interval = value_discretization_interval
        self._history = []
        self._cache = {}

    def compose(self, noise_multiplier, sample_rate=1.0, steps=1):
        """Record ``steps`` releases of the Poisson-subsampled Gaussian mechanism.

        Parameters
        ----------
        noise_multiplier : float
            Noise standard deviation over the L2 sensitivity of the release.
            Zero means no noise: epsilon becomes infinite.
        sample_rate : float, default=1.0
            Poisson sampling rate in (0, 1].
        steps : int, default=1
            Number of such releases.

        Returns
        -------
        self : PLDAccountant
            The accountant, for chaining.
        """
        noise_multiplier, sample_rate, steps = _check_step(
            noise_multiplier, sample_rate, steps
        )
        if self._history and self._history[-1][:2] == (noise_multiplier, sample_rate):
            last = self._history.pop()
            steps += last[2]
        self._history.append((noise_multiplier, sample_rate, steps))
        self._cache = {}
        return self

    def get_privacy_spent(self, delta):
        """Epsilon spent at ``delta``, with the interface of :class:`RDPAccountant`.

        Parameters
        ----------
        delta : float
            Target delta in (0, 1).

        Returns
        -------
        epsilon : float
            The epsilon spent.
        best_order : float
            NaN: a privacy loss distribution has no Renyi order.
        """
        return self.get_epsilon(delta), float("nan")

    def get_epsilon(self, delta):
        """Epsilon spent at ``delta``: never below the true epsilon.

        Parameters
        ----------
        delta : float
            Target delta in (0, 1).

        Returns
        -------
        epsilon : float
            The epsilon spent (0 when nothing was composed, ``inf`` after a
            noise-free release).
        """
        check_privacy_params(delta=delta)
        if not self._history:
            return 0.0
        if delta not in self._cache:
            self._cache[delta] = _pld_epsilon(
                tuple(self._history),
                delta,
                self.neighbouring_relation,
                self.value_discretization_interval,
            )
        return self._cache[delta]

    def copy(self):
        """Return an independent copy.

        Returns
        -------
        accountant : PLDAccountant
            The copy, with the same history.
        """
        new = PLDAccountant.__new__(PLDAccountant)
        new.neighbouring_relation = self.neighbouring_relation
        new.value_discretization_interval = self.value_discretization_interval
        new._history = list(self._history)
        new._cache = dict(self._cache)
        return new



# The PLD grid's width when none is given. The composition's cost grows with
# the epsilon over the width (at 1e-3: 0.2 s at epsilon 32 and 4 s at 3200
# for 4000 sampled steps; epsilon 1e6 did not finish in 5 minutes). So the
# width is _PLD_RELATIVE_INTERVAL times a first upper bound (the Renyi-DP
# epsilon, then the PLD epsilon on that coarser grid), at least
# _PLD_MIN_INTERVAL: the pessimistic rounding stays a small share of the
# epsilon at bounded cost. Beyond a Renyi-DP epsilon of _PLD_MAX_RDP_EPSILON
# (where dp-accounting's grid overflows) that epsilon, also an upper bound,
# is the answer.
_PLD_MIN_INTERVAL = 1e-3
_PLD_RELATIVE_INTERVAL = 1e-4
_PLD_MAX_RDP_EPSILON = 1e6


def _history_rdp_epsilon(history, delta, relation):
    orders_key = tuple(DEFAULT_ORDERS.tolist())
    rdp = np.zeros(len(orders_key))
    for noise_multiplier, sample_rate, steps in history:
        if math.isinf(noise_multiplier):
            continue
        rdp = rdp + steps * _cached_rdp_one_step(
            noise_multiplier, sample_rate, orders_key, relation
        )
    return rdp_to_epsilon(DEFAULT_ORDERS, rdp, delta)[0]


@functools.lru_cache(maxsize=1024)
def _pld_epsilon(history, delta, relation, interval=None):
    if any(noise_multiplier == 0 for noise_multiplier, _, _ in history):
        return math.inf
    if interval is not None:
        return _composed_pld_epsilon(history, delta, relation, interval)
    rdp_epsilon = _history_rdp_epsilon(history, delta, relation)
    if rdp_epsilon > _PLD_MAX_RDP_EPSILON:
        return rdp_epsilon
    interval = _PLD_MIN_INTERVAL
    if math.isfinite(rdp_epsilon):
        interval = max(interval, _PLD_RELATIVE_INTERVAL * rdp_epsilon)
    epsilon = _composed_pld_epsilon(history, delta, relation, interval)
    finer = max(_PLD_MIN_INTERVAL, _PLD_RELATIVE_INTERVAL * epsilon)
    if finer < interval / 2:
        # Both are upper bounds; the finer grid's is the tighter.
        epsilon = min(epsilon, _composed_pld_epsilon(history, delta, relation, finer))
    return epsilon


def _composed_pld_epsilon(history, delta, relation, interval):
    dp_accounting, pld_privacy_accountant = _import_dp_accounting()
    relations = {
        "add_remove": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        "substitution": dp_accounting.NeighboringRelation.REPLACE_ONE,
    }
    accountant = pld_privacy_accountant.PLDAccountant(
        relations[relation], value_discretization_interval=interval
    )
    for noise_multiplier, sample_rate, steps in history:
        if math.isinf(noise_multiplier):
            continue
        event = dp_accounting.PoissonSampledDpEvent(
            sample_rate, dp_accounting.GaussianDpEvent(noise_multiplier)
        )
        accountant.compose(event, steps)
    return max(0.0, float(accountant.get_epsilon(delta)))


def make_accountant(accountant="rdp", neighbouring_relation="add_remove"):
    """A fresh accountant of the given kind.

    Parameters
    ----------
    accountant : {"rdp", "pld"}, default="rdp"
        :class:`RDPAccountant` (no extra dependency) or the tight
        :class:`PLDAccountant` (needs dp-accounting).
    neighbouring_relation : {"add_remove", "substitution"}, default="add_remove"
        The relation its epsilon holds for.

    Returns
    -------
    accountant : RDPAccountant or PLDAccountant
        An accountant with no step recorded.
    """
    if accountant == "rdp":
        return RDPAccountant(neighbouring_relation=neighbouring_relation)
    if accountant == "pld":
        return PLDAccountant(neighbouring_relation=neighbouring_relation)
    raise ValueError(f'accountant must be "rdp" or "pld"; got {accountant!r}.')


def calibrate_noise_multiplier(
    target_epsilon,
    delta,
    sample_rate=1.0,
    steps=1,
    *,
    orders=None,
    rtol=1e-3,
    accountant="rdp",
    neighbouring_relation="add_remove",
    preceded_by=(),
):
    """Smallest noise multiplier whose composed releases meet a target epsilon.

    Bisection (in log scale) on the noise multiplier: epsilon decreases as the
    noise grows. Results are cached, so estimators that plan the same fit
    again do not pay for the search again.

    Parameters
    ----------
    target_epsilon : float
        The epsilon budget, positive and finite.
    delta : float
        Target delta in (0, 1).
    sample_rate : float, default=1.0
        Poisson sampling rate of each release.
    steps : int, default=1
        Number of releases.
    orders : array-like of float, default=None
        Renyi orders of the RDP accountant; :data:`DEFAULT_ORDERS` when None.
    rtol : float, default=1e-3
        Relative precision: the returned ``sigma`` meets the target and
        ``sigma / (1 + rtol)`` does not.
    accountant : {"rdp", "pld"}, default="rdp"
        The accountant whose epsilon must meet the target. The tight "pld"
        gives a smaller multiplier for the same claim.
    neighbouring_relation : {"add_remove", "substitution"}, default="add_remove"
        The relation the target epsilon holds for.
    preceded_by : sequence of (noise_multiplier, sample_rate, steps), default=()
        Releases with fixed multipliers composed before the calibrated ones
        (the target covers them all).

    Returns
    -------
    noise_multiplier : float
        The calibrated noise multiplier.

    Raises
    ------
    ValueError
        If the releases of ``preceded_by`` alone reach the target.

    Examples
    --------
    >>> from skprivfact.accounting import RDPAccountant, calibrate_noise_multiplier
    >>> sigma = calibrate_noise_multiplier(1.0, 1e-5, sample_rate=0.01, steps=1000)
    >>> RDPAccountant().compose(sigma, 0.01, 1000).get_epsilon(1e-5) <= 1.0
    True
    """
    check_privacy_params(epsilon=target_epsilon, delta=delta)
    noise, sample_rate, steps = _check_step(1.0, sample_rate, steps)
    if not (isinstance(rtol, Real) and 0 < rtol < 1):
        raise ValueError(f"rtol must lie in (0, 1); got {rtol!r}.")
    orders = _check_orders(orders)
    relation = _check_relation(neighbouring_relation)
    if accountant not in ("rdp", "pld"):
        raise ValueError(f'accountant must be "rdp" or "pld"; got {accountant!r}.')
    preceded_by = tuple(
        _check_step(fixed_sigma, fixed_rate, fixed_steps)
        for fixed_sigma, fixed_rate, fixed_steps in preceded_by
    )
    return _calibrate(
        float(target_epsilon),
        float(delta),
        sample_rate,
        steps,
        tuple(orders.tolist()),
        float(rtol),
        accountant,
        relation,
        preceded_by,
    )


# The largest noise multiplier a calibration tries.
_MAX_NOISE_MULTIPLIER = 1e8


@functools.lru_cache(maxsize=256)
def _calibrate(
    target_epsilon, delta, sample_rate, steps, orders_key, rtol, kind, relation, preceded_by=()
):
    orders = np.array(orders_key)
    fixed_rdp = sum(
        (
            fixed_steps * _cached_rdp_one_step(fixed_sigma, fixed_rate, orders_key, relation)
            for fixed_sigma, fixed_rate, fixed_steps in preceded_by
        ),
        np.zeros(len(orders_key)),
    )
    fixed_rdp_epsilon = rdp_to_epsilon(orders, fixed_rdp, delta)[0] if preceded_by else 0.0
    fixed_epsilon = fixed_rdp_epsilon
    if kind == "pld" and preceded_by:
        fixed_epsilon = _pld_epsilon(preceded_by, delta, relation)
    if preceded_by and fixed_epsilon >= target_epsilon:
        raise ValueError(
            f"The releases made first already spend epsilon = {fixed_epsilon:.4g} "
            f"of the target {target_epsilon!r}: nothing is left to calibrate."
        )

    def rdp_epsilon(sigma):
        rdp = fixed_rdp + steps * _cached_rdp_one_step(sigma, sample_rate, orders_key, relation)
        return rdp_to_epsilon(orders, rdp, delta)[0]

    def pld_epsilon(sigma):
        history = preceded_by + ((sigma, sample_rate, steps),)
        return _pld_epsilon(history, delta, relation)

    def search(epsilon, low, high):
        # Invariant: epsilon(low) > target >= epsilon(high).
        while high / low > 1.0 + rtol / 2.0:
            middle = math.sqrt(low * high)
            if epsilon(middle) > target_epsilon:
                low = middle
            else:
                high = middle
        return high

    def bracket(epsilon):
        # (low, high) around the target, (None, high) when a multiplier of
        # 1e-8 already meets it, None when none up to 1e8 does.
        low, high = 1.0, 1.0
        if epsilon(high) > target_epsilon:
            while epsilon(high) > target_epsilon:
                if high >= _MAX_NOISE_MULTIPLIER:
                    return None
                low, high = high, min(high * 2.0, _MAX_NOISE_MULTIPLIER)
        else:
            while epsilon(low) <= target_epsilon:
                low, high = low / 2.0, low
                if low < 1e-8:
                    return None, high
        return low, high

    # The bracket is searched with the RDP epsilon (cheap), unless releases
    # made first under the tight accountant already exceed the target by RDP:
    # then only the PLD epsilon can be met.
    bracket_epsilon = rdp_epsilon
    if kind == "pld" and fixed_rdp_epsilon >= target_epsilon:
        bracket_epsilon = pld_epsilon
    found = bracket(bracket_epsilon)
    if found is None and bracket_epsilon is rdp_epsilon and kind == "pld":
        # RDP's conversion has a floor (its largest order) that the tight
        # accountant does not: search with the PLD epsilon itself.
        bracket_epsilon = pld_epsilon
        found = bracket(pld_epsilon)
    if found is None:
        floor = ""
        if kind == "rdp":
            floor = (
                " The RDP accountant certifies epsilon = "
                f"{rdp_epsilon(_MAX_NOISE_MULTIPLIER):.4g} there (its conversion "
                "from Renyi DP is bounded below for these releases at this delta); "
                'accountant="pld" is tight.'
            )
        raise ValueError(
            f"No noise multiplier up to {_MAX_NOISE_MULTIPLIER:g} meets the target "
            f"epsilon {target_epsilon!r} at delta {delta!r}.{floor}"
        )
    low, high = found
    if low is None:
        return high
    sigma = search(bracket_epsilon, low, high)
    if kind == "rdp" or bracket_epsilon is pld_epsilon:
        return sigma
    # The PLD epsilon is at most the RDP one, so the RDP multiplier usually
    # meets the target: search below it. Not always: the PLD's pessimistic
    # discretisation can put it above the RDP one at small targets or over
    # many steps; then search above it.
    if pld_epsilon(sigma) > target_epsilon:
        low, high = sigma, sigma
        while pld_epsilon(high) > target_epsilon:
            if high >= _MAX_NOISE_MULTIPLIER:
                raise ValueError(
                    f"No noise multiplier up to {_MAX_NOISE_MULTIPLIER:g} meets the "
                    f"target epsilon {target_epsilon!r} at delta {delta!r}."
                )
            low, high = high, min(high * 2.0, _MAX_NOISE_MULTIPLIER)
        return search(pld_epsilon, low, high)
    low = sigma / 2.0
    while pld_epsilon(low) <= target_epsilon:
        low /= 2.0
        if low < 1e-8:
            return low * 2.0
    return search(pld_epsilon, low, sigma)


def geometric_alpha(epsilon, sensitivity=1):
    """Noise parameter of the two-sided geometric mechanism for a privacy level.

    Adding noise tau with P(tau = t) proportional to ``alpha**|t|`` to every
    count gives (N, epsilon)-limited-precision local privacy with
    ``alpha = exp(-epsilon / N)``, N = ``sensitivity``.

    Parameters
    ----------
    epsilon : float
        Privacy level, positive and finite.
    sensitivity : int, default=1
        The L1 distance N within which inputs are protected.

    Returns
    -------
    alpha : float
        ``exp(-epsilon / sensitivity)``, in (0, 1).

    Examples
    --------
    >>> from skprivfact.accounting import geometric_alpha
    >>> round(geometric_alpha(2.0, sensitivity=2), 6)
    0.367879
    """
    check_privacy_params(epsilon=epsilon, sensitivity=sensitivity)
    return math.exp(-epsilon / sensitivity)


def geometric_epsilon(alpha, sensitivity=1):
    """Privacy level of the two-sided geometric mechanism with parameter alpha.

    The inverse of :func:`geometric_alpha`: ``epsilon = -sensitivity * log(alpha)``.

    Parameters
    ----------
    alpha : float
        Noise parameter in the open interval (0, 1).
    sensitivity : int, default=1
        The L1 distance N within which inputs are protected.

    Returns
    -------
    epsilon : float
        The epsilon of (N, epsilon)-limited-precision local privacy.

    Examples
    --------
    >>> from skprivfact.accounting import geometric_epsilon
    >>> round(geometric_epsilon(0.5), 6)
    0.693147
    """
    if not (isinstance(alpha, Real) and not isinstance(alpha, bool) and 0 < alpha < 1):
        raise ValueError(f"alpha must lie in the open interval (0, 1); got {alpha!r}.")
    check_privacy_params(sensitivity=sensitivity)
    return -sensitivity * math.log(alpha)
