"""Differentially private sigmoid belief network (VIPS, Polya-Gamma VB)."""

import math
from numbers import Integral, Real

import numpy as np
from scipy import special
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _num_samples, check_is_fitted

from . import _sbn_kernels as kernels
from .base import CentralPrivacyEstimator
from .mechanisms import clip_rows
from .utils._validation import validate_input

__all__ = ["DPSigmoidBeliefNet", "sigmoid_belief_net_log_likelihood"]

# Largest mean of a Polya-Gamma(1, c) variable, attained at c = 0.
_MAX_EXPECTED_OMEGA = 0.25
# Step exponent of the running averages under noise or subsampling, as in
# DPBayesLogReg.
_AUTO_LEARNING_DECAY = 0.8
# The averaged second-moment matrices are floored at this many times the
# typical spectral radius of the noise they hold (see DPBayesLogReg).
_NOISE_FLOOR_FACTOR = 1.0
# Fixed-point iterations of q(c) (the hidden-unit logits), from the released
# count of active hidden units; a contraction that settles in a few steps.
_HIDDEN_PRIOR_ITER = 30
# The importance proposal mixes the mean-field posterior with a fair coin, so
# that its weights stay bounded where the posterior is overconfident.
_PROPOSAL_MIXING = 0.05
# Variance of the initial q(theta_j): small, so that the random initial
# weights (which break the symmetry of the hidden units) are what the first
# local step sees.
_INIT_VARIANCE = 0.01
# Rows per chunk of the local step (memory).
_CHUNK = 8192
# Largest number of hidden units for which the exact log-likelihood
# enumerates the 2**n_components hidden states.
_MAX_EXACT_HIDDEN = 20


def _centred_observations(X):
    """``u = v - 1/2`` of each row, clipped to Euclidean norm ``sqrt(D) / 2``.

    A row with values in [0, 1] (binary rows in particular) satisfies the
    bound already and is kept (up to a relative rounding margin); a row
    outside is scaled onto it. This clip is what bounds each record's
    contribution to the data-dependent blocks.
    """
    X = np.asarray(X, dtype=np.float64)
    return clip_rows(X - 0.5, 0.5 * math.sqrt(X.shape[1]))


def _block_sensitivities(n_features, n_components):
    """Per-record L2 bounds of the three released blocks.

    ``A = sum_n E[omega_n] (x) triu(E[h~ h~'])``: ``||E[omega_n]|| <=
    sqrt(D) / 4`` and the packed upper triangle of ``E[h~ h~']`` has at most
    ``T = (K + 1)(K + 2) / 2`` entries in [0, 1], so a record adds at most
    ``sqrt(D) / 4 * sqrt(T)``. ``r = sum_n u_n (x) [mu_n; 1]``: ``||u_n|| <=
    sqrt(D) / 2`` and ``||[mu_n; 1]|| <= sqrt(K + 1)``. ``s = sum_n mu_n``:
    ``||mu_n|| <= sqrt(K)``.
    """
    n_tri = (n_components + 1) * (n_components + 2) // 2
    root_d = math.sqrt(n_features)
    return (
        _MAX_EXPECTED_OMEGA * root_d * math.sqrt(n_tri),
        0.5 * root_d * math.sqrt(n_components + 1),
        math.sqrt(n_components),
    )


class _LocalStep:
    """The per-record mean-field step under given global expectations.

    Parameters
    ----------
    mean : ndarray of shape (n_features, n_components + 1)
        ``E[theta_j]``, the weights of visible unit ``j`` and its bias last.
    second_moment : ndarray of shape (n_features, n_components + 1, n_components + 1)
        ``E[theta_j theta_j']``.
    hidden_logit : ndarray of shape (n_components,)
        ``E[c_k]``.
    """

    def __init__(self, mean, second_moment, hidden_logit):
        n_features, size = mean.shape
        self.n_hidden = size - 1
        self.index = kernels.tri_index(size)
        rows, cols = np.triu_indices(size)
        self.second_tri = np.ascontiguousarray(second_moment[:, rows, cols])
        # psi^2 = sum_{k<=l} (2 - [k == l]) M_kl E_kl.
        self.second_tri_doubled = np.ascontiguousarray(
            (self.second_tri * np.where(rows == cols, 1.0, 2.0)).T
        )
        # The sweeps' two products over the visible units run in float32
        # (half the time; the local step is a fixed-point iteration, and its
        # final quantities, which enter the statistics, are in float64).
        self.second_tri_32 = self.second_tri.astype(np.float32)
        self.second_tri_doubled_32 = self.second_tri_doubled.astype(np.float32)
        self.weights = np.ascontiguousarray(mean[:, : self.n_hidden])
        self.bias = mean[:, self.n_hidden]
        self.hidden_logit = hidden_logit

    def __call__(self, U, n_sweeps, tol=0.0):
        """Run the local step on centred rows ``U``.

        Each row is swept until no ``mu_nk`` moves by more than ``tol`` in a
        sweep, at most ``n_sweeps`` times; a row's sweeps depend on that row
        only.

        Returns
        -------
        mu : ndarray of shape (n, K)
            ``q(h_nk = 1)``.
        omega : ndarray of shape (n, D)
            ``E[omega_nj]`` at the final ``mu``.
        outer_tri : ndarray of shape (n, T)
            Packed ``E[h~ h~']`` at the final ``mu``.
        squared_scale : ndarray of shape (n, D)
            ``E[psi_nj^2]`` at the final ``mu``.
        """
        n = U.shape[0]
        linear = U @ self.weights
        linear += self.hidden_logit
        mu = np.full((n, self.n_hidden), 0.5)
        active = None  # every row
        for _ in range(n_sweeps):
            sub_mu = mu if active is None else mu[active]
            sub_linear = linear if active is None else linear[active]
            outer_tri = np.empty(
                (sub_mu.shape[0], self.second_tri.shape[1]), dtype=np.float32
            )
            kernels.expected_outer_tri(sub_mu, outer_tri)
            squared_scale = outer_tri @ self.second_tri_doubled_32
            omega = np.empty_like(squared_scale)
            kernels.polya_gamma_mean(squared_scale, omega)
            quadratic = omega @ self.second_tri_32
            previous = sub_mu.copy()
            kernels.mean_field_sweep(sub_mu, sub_linear, quadratic, self.index)
            if active is not None:
                mu[active] = sub_mu
            moving = np.abs(sub_mu - previous).max(axis=1, initial=0.0) > tol
            active = np.flatnonzero(moving) if active is None else active[moving]
            if active.size == 0:
                break
        outer_tri = np.empty((n, self.second_tri.shape[1]))
        kernels.expected_outer_tri(mu, outer_tri)
        squared_scale = outer_tri @ self.second_tri_doubled
        omega = np.empty_like(squared_scale)
        kernels.polya_gamma_mean(squared_scale, omega)
        return mu, omega, outer_tri, squared_scale


def _point_local_step(weights, visible_bias, hidden_logits):
    """The local step of a point SBN (no parameter uncertainty)."""
    mean = np.hstack([weights, visible_bias[:, np.newaxis]])
    return _LocalStep(mean, mean[:, :, np.newaxis] * mean[:, np.newaxis, :], hidden_logits)


def _bernoulli_entropy(mu):
    return -(special.xlogy(mu, mu) + special.xlogy(1.0 - mu, 1.0 - mu)).sum(axis=1)


def sigmoid_belief_net_log_likelihood(X, weights, visible_bias, hidden_logits):
    """Exact ``log p(v)`` of each row under a one-layer sigmoid belief network.

    ``h_k ~ Bernoulli(sigmoid(hidden_logits[k]))`` independently and
    ``v_j | h ~ Bernoulli(sigmoid(weights[j] @ h + visible_bias[j]))``; the
    ``2**K`` hidden states are enumerated, so ``K`` is limited to 20.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Binary rows (values in [0, 1] are read as soft observations,
        ``v log p + (1 - v) log(1 - p)``).
    weights : array-like of shape (n_features, n_components)
        The visible-hidden weights (``components_.T`` of a fitted
        :class:`~skprivfact.DPSigmoidBeliefNet`).
    visible_bias : array-like of shape (n_features,)
        The visible biases.
    hidden_logits : array-like of shape (n_components,)
        The logits of the hidden units' prior.

    Returns
    -------
    log_likelihood : ndarray of shape (n_samples,)
        ``log p(v)`` of each row, in nats.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact.sbn import sigmoid_belief_net_log_likelihood
    >>> X = np.array([[1.0, 0.0]])
    >>> ll = sigmoid_belief_net_log_likelihood(X, np.zeros((2, 3)), np.zeros(2), np.zeros(3))
    >>> bool(np.isclose(ll[0], 2 * np.log(0.5)))
    True
    """
    X = np.asarray(X, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    visible_bias = np.asarray(visible_bias, dtype=np.float64)
    hidden_logits = np.asarray(hidden_logits, dtype=np.float64)
    n_hidden = weights.shape[1]
    if n_hidden > _MAX_EXACT_HIDDEN:
        raise ValueError(
            f"The exact log-likelihood enumerates 2**n_components hidden states; "
            f"n_components={n_hidden} is above {_MAX_EXACT_HIDDEN}."
        )
    states = ((np.arange(2**n_hidden)[:, None] >> np.arange(n_hidden)) & 1).astype(
        np.float64
    )
    log_prior = states @ hidden_logits + special.log_expit(-hidden_logits).sum()
    out = np.empty(X.shape[0])
    for start in range(0, 2**n_hidden, 4096):
        chunk = states[start : start + 4096]
        logits = chunk @ weights.T + visible_bias  # (S, D)
        # log p(v | h) = v' logit + sum_j log sigmoid(-logit_j).
        joint = X @ logits.T + special.log_expit(-logits).sum(axis=1)
        joint += log_prior[start : start + 4096]
        block = special.logsumexp(joint, axis=1)
        out = block if start == 0 else np.logaddexp(out, block)
    return out


def _batch_statistics(U, local_step, n_sweeps, sensitivities, tol=0.0):
    """The three expected sufficient statistics of a batch, summed over its rows.

    Runs the local step on the centred rows ``U`` and clips each row's
    factors (``E[omega_n]``, the packed ``E[h~_n h~_n']`` and ``mu_n``) to
    the bounds whose products are ``sensitivities``; they hold by
    construction, and the clip makes them hold whatever rounding did. ``U``
    itself is clipped by :func:`_centred_observations`.

    Returns
    -------
    second_sum : ndarray of shape (D, T)
        ``sum_n E[omega_n] (x) triu(E[h~_n h~_n'])``.
    first_sum : ndarray of shape (D, K + 1)
        ``sum_n u_n (x) [mu_n; 1]``.
    hidden_sum : ndarray of shape (K,)
        ``sum_n mu_n``.
    mu : ndarray of shape (n, K)
        The local posteriors.
    """
    sens_second, _, sens_hidden = sensitivities
    second_sum = first_sum = hidden_sum = 0.0
    mus = []
    # In chunks of rows, as at prediction time: the packed outer products
    # take (K + 1)(K + 2) / 2 values per row. Each row's factors depend on
    # that row alone, so the sums are those of the whole batch.
    for start in range(0, max(U.shape[0], 1), _CHUNK):
        rows = U[start : start + _CHUNK]
        mu, omega, outer_tri, _ = local_step(rows, n_sweeps, tol)
        root_tri = math.sqrt(outer_tri.shape[1])
        omega = clip_rows(omega, sens_second / root_tri)
        outer_tri = clip_rows(outer_tri, root_tri)
        mu = clip_rows(mu, sens_hidden)
        second_sum = second_sum + omega.T @ outer_tri
        first_sum = first_sum + rows.T @ np.hstack([mu, np.ones((mu.shape[0], 1))])
        hidden_sum = hidden_sum + mu.sum(axis=0)
        mus.append(mu)
    return second_sum, first_sum, hidden_sum, np.vstack(mus)


class DPSigmoidBeliefNet(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, CentralPrivacyEstimator
):
    """Differentially private sigmoid belief network (VIPS).

    A one-hidden-layer sigmoid belief network for binary data (Neal, 1992),
    fitted by variational Bayes with Polya-Gamma augmentation (Gan, Henao,
    Carlson and Carin, 2015) and made private by releasing its expected
    sufficient statistics through the Gaussian mechanism (Park, Foulds,
    Chaudhuri and Welling, 2020, section 7 and appendices B, C). A
    transformer in the style of :class:`~sklearn.neural_network.BernoulliRBM`:
    :meth:`transform` gives the posterior probabilities of the hidden units.

    Privacy: (epsilon, delta)-differential privacy for replacing one row by
    another (the number of rows is public: it scales the statistics and the
    update of the hidden-unit prior); ``neighbouring_relation_`` says so.
    Each row ``v`` is read through ``u = v - 1/2`` clipped to Euclidean norm
    ``sqrt(n_features) / 2`` (rows with values in [0, 1] satisfy it and are
    kept, up to a relative rounding margin; values outside [0, 1] are
    refused as input, so the clip is a safeguard);
    each iteration draws a Poisson-subsampled batch (rate ``q = batch_size /
    n_samples``, 1 for full batch), runs the local mean-field step of every
    row of the batch under the current (already released) posterior, clips
    each row's factors (``E[omega_n]`` to norm ``sqrt(D) / 4``, the packed
    ``E[h~ h~']`` to ``sqrt(T)``, ``mu_n`` to ``sqrt(K)``) and releases the
    three batch sums of the Notes together as ONE Gaussian mechanism, block
    ``i`` getting noise of std ``noise_multiplier_ * sqrt(3) *
    sensitivities_[i]``
    (:func:`~skprivfact.mechanisms.gaussian_mechanism`): one accountant
    step per iteration. The noise multiplier is calibrated once per plan so
    that all the releases (``max_iter`` passes of ``ceil(1 / q)``
    iterations), composed by ``accountant``, spend at most
    ``(epsilon, delta)``; ``privacy_spent_`` reports it. Batches and noise
    come from the operating system's entropy, a fresh stream per release
    (:class:`~skprivfact.privacy.PrivacyEngine`); ``random_state`` seeds
    only the initial weights and the importance samples of :meth:`score`.
    Everything fitted is post-processing of the releases. Not covered: the
    number of rows and of features. ``epsilon=float("inf")`` runs the same
    algorithm without noise.

    Parameters
    ----------
    n_components : int, default=10
        Number of binary hidden units ``K``.
    epsilon : float, default=1.0
        Privacy budget of the whole fit, positive; ``float("inf")`` for no
        noise.
    delta : float, default=1e-5
        Privacy parameter delta in (0, 1); choose it well below ``1 /
        n_samples`` (a fit whose ``delta`` exceeds it warns with
        :class:`~skprivfact.exceptions.PrivacyLeakWarning`).
    batch_size : int, default=None
        Expected batch size; each iteration keeps each row independently
        with probability ``batch_size / n_samples``. None (or a value of at
        least ``n_samples``) uses every row in every iteration.
    max_iter : int, default=10
        Number of passes over the data; a pass is ``ceil(n_samples /
        batch_size)`` iterations, each one release.
    max_local_iter : int, default=3
        Largest number of sweeps of the mean-field update of each row's
        ``q(h_n)`` (each preceded by the update of its Polya-Gamma
        expectations) per iteration, from ``q(h_nk = 1) = 1/2``.
    local_tol : float, default=1e-3
        A row's sweeps stop when no ``q(h_nk = 1)`` moved by more than this
        in the last one (each row on its own: its result depends on that row
        only).
    prior_precision : float, default=1.0
        Precision of the zero-mean Gaussian prior of every weight and bias
        of the visible units.
    hidden_prior_precision : float, default=1.0
        Precision of the zero-mean Gaussian prior of the hidden logits ``c``.
    learning_decay : float or "auto", default="auto"
        Exponent ``kappa`` in [0, 1] of the step ``rho_t = (learning_offset +
        t) ** -kappa`` of the running averages of the released statistics;
        0 replaces them at every iteration (plain variational Bayes).
        "auto" is 0 without noise and without subsampling, and 0.8
        otherwise.
    learning_offset : float, default=1.0
        Offset ``tau_0 >= 0`` of the step.
    init_scale : float, default=0.5
        Standard deviation, positive, of the random initial weights (drawn
        from ``random_state``, without looking at the data): they break the
        symmetry between hidden units, which all-zero weights would keep.
    n_importance_samples : int, default=200
        Importance samples per row in :meth:`score_samples`.
    accountant : {"rdp", "pld"}, default="rdp"
        The privacy accountant.
    budget : PrivacyBudget, default=None
        A budget shared across fits, charged by every release.
    secure : bool, default=False
        Floating-point-safe noise (exact discrete Gaussian on a fine grid,
        from the operating system's cryptographic randomness); needs full
        batches and ``accountant="rdp"``.
    verbose : int or "bar", default=0
        Progress in the format of every skprivfact estimator: 1 prints about
        ten lines, 2 one per pass (the epsilon spent so far, elapsed time and
        time left, and without privacy, ``epsilon=float("inf")``, the mean
        variational bound of the last batch, which a private fit does not
        release), and :meth:`partial_fit` a line per call (its release and
        the epsilon spent); "bar" draws a tqdm bar (the ``progress`` extra).
    random_state : int, RandomState instance or None, default=None
        Seeds the initial weights, the importance samples, and the batches of
        a fit without noise (``epsilon=inf``, no privacy); a private fit's
        batches and noise never come from it.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        Posterior mean of the weights ``W`` (hidden unit by visible unit).
    intercept_visible_ : ndarray of shape (n_features,)
        Posterior mean of the visible biases ``b``.
    intercept_hidden_ : ndarray of shape (n_components,)
        Posterior mean of the hidden logits ``c``.
    coef_covariance_ : ndarray of shape (n_features, n_components + 1, n_components + 1)
        Posterior covariance of each visible unit's ``(W[:, j], b_j)``.
    hidden_logit_variance_ : ndarray of shape (n_components,)
        Posterior variance of each ``c_k``.
    noise_multiplier_ : float
        Noise std of each release relative to its joint sensitivity.
    sample_rate_ : float
        Poisson sampling rate of the batches.
    sensitivities_ : tuple of float
        Per-record bounds of the three released blocks.
    learning_decay_ : float
        The step exponent used.
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` spent by the current model.
    neighbouring_relation_ : {"substitution"}
        The relation ``privacy_spent_`` holds for.
    accountant_ : RDPAccountant or PLDAccountant
        The accountant, one step per release.
    reproducible_noise_ : bool
        Whether the fit ran inside
        :func:`~skprivfact.privacy.reproducible_noise` (not private).
    n_iter_ : int
        Number of passes completed by :meth:`fit` (``partial_fit`` counts its
        iterations in ``n_batch_iter_``).
    n_batch_iter_ : int
        One more than the number of iterations (released statistics) so far,
        as in scikit-learn's online LDA; it sets the step size.
    n_releases_ : int
        Releases (iterations) run.
    n_features_in_ : int
        Number of features seen during :term:`fit`.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`, when ``X`` has string
        column names.

    See Also
    --------
    sklearn.neural_network.BernoulliRBM : Non-private, undirected model.
    skprivfact.DPBayesLogReg : The same Polya-Gamma VIPS for one logistic unit.

    Notes
    -----
    **Model.** For each row ``v in {0, 1}^D``, ``h_k ~ Bernoulli(sigmoid(c_k))``
    independently (``k = 1..K``) and ``v_j | h ~ Bernoulli(sigmoid(psi_j))``
    with ``psi_j = theta_j' h~``, ``h~ = [h; 1]``, ``theta_j = (W[:, j], b_j)``.
    Priors: ``theta_j ~ N(0, I / prior_precision)``, ``c_k ~ N(0, 1 /
    hidden_prior_precision)``. With ``u_j = v_j - 1/2``, ``p(v_j | psi) =
    exp(u_j psi) / (2 cosh(psi / 2))``, and the Polya-Gamma identity
    (Polson, Scott and Windle, 2013) gives, with ``omega_j ~ PG(1, 0)``,
    ``p(v_j, omega_j | psi) = exp(u_j psi - omega_j psi^2 / 2) p(omega_j) / 2``:
    Gaussian in ``theta_j`` (Gan et al., 2015).

    **Variational family.** ``q = prod_n [prod_k Bern(h_nk; mu_nk) prod_j
    PG(omega_nj; 1, xi_nj)] prod_j N(theta_j; m_j, S_j) prod_k N(c_k; a_k,
    v_k)``. Coordinate ascent gives, per row (the local step, never
    stored), with ``M_j = E[theta_j theta_j'] = S_j + m_j m_j'`` and ``E_n
    = E[h~_n h~_n']`` (``mu_k mu_l`` off the diagonal, ``mu_k`` on it since
    ``h^2 = h``, and 1 in the corner)::

        xi_nj^2 = E[psi_nj^2] = tr(M_j E_n),
        E[omega_nj] = tanh(xi_nj / 2) / (2 xi_nj)            (<= 1/4),
        logit(mu_nk) = a_k + sum_j u_nj m_jk
                       - sum_j E[omega_nj] (M_j,kk / 2 + M_j,kK
                                             + sum_{l != k} M_j,kl mu_nl),

    the last updated unit by unit (Gauss-Seidel); each sweep is preceded by
    the update of the ``E[omega_nj]``, and a row's sweeps stop after
    ``max_local_iter`` of them or once none of its ``mu_nk`` moves by more
    than ``local_tol`` (the two contractions over ``j`` inside the sweeps
    run in float32; the final ``E[omega_n]`` and ``E_n`` are float64).
    Each sweep can only raise the bound of the scores below at fixed
    parameters (coordinate ascent).
    The global updates are conjugate, from the expected sufficient statistics
    ``A_j = sum_n E[omega_nj] E_n``, ``r_j = sum_n u_nj [mu_n; 1]`` and
    ``s = sum_n mu_n``::

        S_j^-1 = prior_precision I + A_j,          m_j = S_j r_j,
        1 / v_k = hidden_prior_precision + N E[omega^c_k],
        a_k = v_k (s_k - N / 2),
        E[omega^c_k] = tanh(z_k / 2) / (2 z_k),  z_k^2 = a_k^2 + v_k,

    for ``q(c_k) = N(a_k, v_k)`` (the hidden logits are shared by all rows:
    with ``h_nk`` augmented by ``omega^c_nk ~ PG(1, c_k)``, its expectation
    is the same for every row, so only ``s`` is data-dependent; the ``q(c)``
    update is iterated to its fixed point). ``a_k`` enters the local step
    above as the prior log-odds of ``h_nk``.

    **Privacy.** Each record adds ``E[omega_n] (x) triu(E_n)`` to the stack
    of all ``D`` packed upper triangles (a symmetric matrix is determined by
    its upper triangle, so only ``T = (K + 1)(K + 2) / 2`` numbers per
    visible unit are released), ``u_n (x) [mu_n; 1]`` to the stack of the
    ``r_j`` and ``mu_n`` to ``s``. The L2 norm of a Kronecker product is the
    product of the norms, so the per-record bounds are ``sqrt(D) sqrt(T) /
    4``, ``sqrt(D) sqrt(K + 1) / 2`` and ``sqrt(K)`` (appendix B of Park et
    al. states the corresponding bounds block by block; here the ``D``
    matrices of the first block are one block, as the whole stack is what
    one record moves). The three blocks form ONE release
    (:meth:`~skprivfact.privacy.PrivacyEngine.release`).

    **Post-processing.** Released batch sums are scaled by ``n_samples /
    (q n_samples)`` and enter running averages with step ``rho_t``. The
    averaged ``A_j`` are made symmetric and their eigenvalues floored at
    the typical spectral radius of the noise they hold (zero without noise);
    ``s`` is clipped to ``[0, N]``.

    **Scores.** :meth:`score_samples` estimates ``log p(v)`` under the
    posterior-mean parameters by importance sampling with the mean-field
    ``q(h | v)`` as proposal (its expectation is a lower bound that tightens
    with ``n_importance_samples``); :meth:`lower_bound` is the variational
    (Jaakkola-Jordan) bound
    ``sum_j [u_j E[psi_j] - log 2 cosh(xi_j / 2)] + sum_k [mu_k c_k + log
    sigmoid(-c_k)] + H(q(h))``; :func:`~skprivfact.sbn.sigmoid_belief_net_log_likelihood`
    is exact for small ``K``.

    References
    ----------
    M. Park, J. Foulds, K. Chaudhuri and M. Welling, "Variational Bayes in
    private settings (VIPS)", Journal of Artificial Intelligence Research 68,
    2020.

    Z. Gan, R. Henao, D. Carlson and L. Carin, "Learning deep sigmoid belief
    networks with data augmentation", AISTATS 2015.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact import DPSigmoidBeliefNet
    >>> from skprivfact.datasets import make_sigmoid_belief_net
    >>> X, _, _ = make_sigmoid_belief_net(2000, 16, 3, random_state=0)
    >>> sbn = DPSigmoidBeliefNet(3, epsilon=2.0, batch_size=200, max_iter=2,
    ...                          random_state=0).fit(X)
    >>> sbn.transform(X[:2]).shape
    (2, 3)
    >>> sbn.privacy_spent_[0] <= 2.0
    True
    """

    _parameter_constraints: dict = {
        **CentralPrivacyEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "batch_size": [Interval(Integral, 1, None, closed="left"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "max_local_iter": [Interval(Integral, 1, None, closed="left")],
        "local_tol": [Interval(Real, 0, None, closed="left")],
        "prior_precision": [Interval(Real, 0, None, closed="neither")],
        "hidden_prior_precision": [Interval(Real, 0, None, closed="neither")],
        "learning_decay": [Interval(Real, 0, 1, closed="both"), StrOptions({"auto"})],
        "learning_offset": [Interval(Real, 0, None, closed="left")],
        "init_scale": [Interval(Real, 0, None, closed="neither")],
        "n_importance_samples": [Interval(Integral, 1, None, closed="left")],
        "verbose": ["verbose", StrOptions({"bar"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components=10,
        *,
        epsilon=1.0,
        delta=1e-5,
        batch_size=None,
        max_iter=10,
        max_local_iter=3,
        local_tol=1e-3,
        prior_precision=1.0,
        hidden_prior_precision=1.0,
        learning_decay="auto",
        learning_offset=1.0,
        init_scale=0.5,
        n_importance_samples=200,
        accountant="rdp",
        budget=None,
        secure=False,
        verbose=0,
        random_state=None,
    ):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.max_local_iter = max_local_iter
        self.local_tol = local_tol
        self.prior_precision = prior_precision
        self.hidden_prior_precision = hidden_prior_precision
        self.learning_decay = learning_decay
        self.learning_offset = learning_offset
        self.init_scale = init_scale
        self.n_importance_samples = n_importance_samples
        self.accountant = accountant
        self.budget = budget
        self.secure = secure
        self.verbose = verbose
        self.random_state = random_state

    @property
    def _n_features_out(self):
        """Number of transformed output features (the hidden units)."""
        return self.components_.shape[0]

    # Training ---------------------------------------------------------------

    def _start(self, n_samples, reserve=None):
        engine = self._start_privacy(n_samples, self.batch_size, reserve=reserve)
        if self.learning_decay == "auto":
            noise_free = self.noise_multiplier_ == 0 and self.sample_rate_ == 1.0
            self.learning_decay_ = 0.0 if noise_free else _AUTO_LEARNING_DECAY
        else:
            self.learning_decay_ = float(self.learning_decay)
        return engine

    def _init_latent_vars(self, n_features):
        """Initial posterior, drawn without looking at the data."""
        K, D = self.n_components, n_features
        rng = check_random_state(self.random_state)
        self.sensitivities_ = _block_sensitivities(D, K)
        self._tri_rows, self._tri_cols = np.triu_indices(K + 1)
        self._mean = np.zeros((D, K + 1))
        self._mean[:, :K] = self.init_scale * rng.standard_normal((D, K))
        # Start narrow: the prior's spread would swamp the initial weights.
        self._covariance = np.broadcast_to(
            _INIT_VARIANCE * np.eye(K + 1), (D, K + 1, K + 1)
        ).copy()
        self._hidden_mean = np.zeros(K)
        self._hidden_variance = np.full(K, 1.0 / self.hidden_prior_precision)
        # Running averages of the released totals (scaled to n_samples).
        self._avg_second = np.zeros((D, self._tri_rows.size))
        self._avg_first = np.zeros((D, K + 1))
        self._avg_hidden = np.zeros(K)
        self._noise_variance_factor = 0.0
        self.n_batch_iter_ = 1
        self.n_iter_ = 0
        self._publish()

    def _publish(self):
        K = self.n_components
        self.components_ = self._mean[:, :K].T.copy()
        self.intercept_visible_ = self._mean[:, K].copy()
        self.intercept_hidden_ = self._hidden_mean.copy()
        self.coef_covariance_ = self._covariance.copy()
        self.hidden_logit_variance_ = self._hidden_variance.copy()

    def _posterior_local_step(self):
        second = self._covariance + self._mean[:, :, None] * self._mean[:, None, :]
        return _LocalStep(self._mean, second, self._hidden_mean)

    def _step(self, U, engine, local_step):
        """One iteration: batch, local step, one release, global update."""
        n_samples = U.shape[0]
        sample_rate = self.sample_rate_
        if sample_rate < 1.0:
            batch = U[engine.sample(n_samples)]
        else:
            batch = U
        second_sum, first_sum, hidden_sum, mu = _batch_statistics(
            batch, local_step, self.max_local_iter, self.sensitivities_, self.local_tol
        )
        noisy_second, noisy_first, noisy_hidden = engine.release(
            [second_sum, first_sum, hidden_sum], self.sensitivities_
        )

        # Post-processing of the release.
        scale = 1.0 / sample_rate
        step = (self.learning_offset + self.n_batch_iter_) ** -self.learning_decay_
        step = min(step, 1.0)
        self._avg_second += step * (scale * noisy_second - self._avg_second)
        self._avg_first += step * (scale * noisy_first - self._avg_first)
        self._avg_hidden += step * (scale * noisy_hidden - self._avg_hidden)
        self._noise_variance_factor = (
            1.0 - step
        ) ** 2 * self._noise_variance_factor + step**2
        second_noise_std = (
            engine.noise_scales(self.sensitivities_)[0]
            * scale
            * math.sqrt(self._noise_variance_factor)
        )
        self._update_posterior(n_samples, second_noise_std)
        self.n_batch_iter_ += 1
        return mu, batch

    def _update_posterior(self, n_samples, second_noise_std):
        K = self.n_components
        D = self._avg_first.shape[0]
        second = np.empty((D, K + 1, K + 1))
        second[:, self._tri_rows, self._tri_cols] = self._avg_second
        second[:, self._tri_cols, self._tri_rows] = self._avg_second
        if second_noise_std > 0:
            floor = _NOISE_FLOOR_FACTOR * second_noise_std * math.sqrt(K + 1)
            values, vectors = np.linalg.eigh(second)
            values = np.maximum(values, floor)
            second = (vectors * values[:, None, :]) @ np.swapaxes(vectors, 1, 2)
        precision = second + self.prior_precision * np.eye(K + 1)
        factor = np.linalg.cholesky(precision)
        inverse_factor = np.linalg.inv(factor)
        covariance = np.swapaxes(inverse_factor, 1, 2) @ inverse_factor
        self._covariance = (covariance + np.swapaxes(covariance, 1, 2)) / 2.0
        self._mean = np.einsum("jkl,jl->jk", self._covariance, self._avg_first)

        # q(c): fixed point of the conjugate update given the released counts.
        active = np.clip(self._avg_hidden, 0.0, n_samples)
        mean, variance = self._hidden_mean, self._hidden_variance
        omega = np.empty(K)
        for _ in range(_HIDDEN_PRIOR_ITER):
            kernels.polya_gamma_mean(mean**2 + variance, omega)
            precision = self.hidden_prior_precision + n_samples * omega
            variance = 1.0 / precision
            mean = variance * (active - 0.5 * n_samples)
        self._hidden_mean, self._hidden_variance = mean, variance
        self._publish()

    def _check_X(self, X, reset):
        X = validate_input(self, X, reset=reset, dtype=[np.float64, np.float32])
        X = np.asarray(X, dtype=np.float64)
        if X.size and (X.min() < 0.0 or X.max() > 1.0):
            # Other values have no likelihood under the model (a score would
            # come out positive). The value is not named: it may be private.
            raise ValueError(
                f"{type(self).__name__} models binary rows: X must hold values in "
                "[0, 1] (fractions are soft observations). Binarize it first, for "
                "example X > threshold."
            )
        return X

    def _run(self, U, engine, n_steps):
        mu = batch = None
        for _ in range(n_steps):
            mu, batch = self._step(U, engine, self._posterior_local_step())
        return mu, batch

    def _batch_bound(self, batch):
        """Mean variational bound of the last batch (for the data holder only)."""
        if batch is None or not batch.shape[0]:
            return float("nan")
        return float(np.mean(self.lower_bound(batch + 0.5)))

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, **fit_params):
        """Fit the private variational posterior to the binary rows ``X``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary rows (values in [0, 1] are soft observations).
        y : Ignored
            Not used, present for API consistency by convention.
        **fit_params : dict
            None accepted: ``sample_weight`` raises a TypeError saying why.

        Returns
        -------
        self : DPSigmoidBeliefNet
            The fitted estimator.
        """
        self._refuse_fit_params(fit_params)
        private = self._is_private
        # Checked before the plan is reserved: refused input charges no budget.
        X = self._check_X(X, reset=True)
        engine = self._start(X.shape[0])
        self._init_latent_vars(X.shape[1])
        U = _centred_observations(X)
        per_pass = self._releases_per_pass(self.sample_rate_)
        progress = self._make_progress(self.max_iter)
        for n_pass in range(1, self.max_iter + 1):
            _, batch = self._run(U, engine, per_pass)
            self.n_iter_ = n_pass
            progress.update(
                n_pass,
                # the batch's bound is computed without noise: not printed
                # by a private fit
                objective=None if private else (lambda: self._batch_bound(batch)),
                epsilon_spent=lambda: engine.spent[0],
            )
        progress.close()
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None):
        """Take one private iteration on ``X``, spending cumulatively.

        Each call draws one Poisson batch from ``X`` (rate ``batch_size /
        n_samples``) and makes one release. The first call calibrates the
        noise for ``max_iter`` passes over ``X``; later calls check, before
        reading ``X``, that one more step keeps the total within ``epsilon``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The whole (private) data set.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self : DPSigmoidBeliefNet
            The estimator.
        """
        first_time = not hasattr(self, "components_")
        n_samples = _num_samples(X)
        if first_time:
            # Checked before the plan is reserved: refused input charges no budget.
            X = self._check_X(X, reset=True)
            engine = self._start(n_samples, reserve=1)
            self._init_latent_vars(X.shape[1])
        else:
            engine = self._engine
            self._check_plan_unchanged()
            engine.check_next(self._sample_rate(self.batch_size, n_samples))
            X = self._check_X(X, reset=False)
        rate = self._sample_rate(self.batch_size, n_samples)
        if rate != self.sample_rate_:
            raise ValueError(
                "The sampling rate batch_size / n_samples changed since the first "
                "partial_fit; call fit to start a new model."
            )
        self._step(_centred_observations(X), engine, self._posterior_local_step())
        self._show_partial_fit_release()
        return self

    # Inference ----------------------------------------------------------------

    def _local(self, X, local_step):
        U = _centred_observations(X)
        mus, squares = [], []
        for start in range(0, U.shape[0], _CHUNK):
            mu, omega, _, squared = local_step(
                U[start : start + _CHUNK], self.max_local_iter, self.local_tol
            )
            mus.append(mu)
            squares.append(squared)
        if not mus:
            K, D = self.n_components, U.shape[1]
            return U, np.empty((0, K)), np.empty((0, D))
        return U, np.vstack(mus), np.vstack(squares)

    def transform(self, X):
        """Posterior probability of each hidden unit being on, for each row.

        The mean-field ``q(h_nk = 1)`` under the fitted posterior of the
        weights (the local step of training).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary rows.

        Returns
        -------
        h : ndarray of shape (n_samples, n_components)
            ``q(h_nk = 1)``.
        """
        check_is_fitted(self)
        X = self._check_X(X, reset=False)
        return self._local(X, self._posterior_local_step())[1]

    def _point(self):
        return _point_local_step(
            self.components_.T, self.intercept_visible_, self.intercept_hidden_
        )

    def lower_bound(self, X):
        """Variational lower bound on ``log p(v)`` of each row (point parameters).

        The Jaakkola-Jordan bound of the Notes at the posterior-mean
        parameters, maximised over the mean-field ``q(h | v)``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary rows.

        Returns
        -------
        bound : ndarray of shape (n_samples,)
            Lower bounds on ``log p(v)``, in nats.
        """
        check_is_fitted(self)
        X = self._check_X(X, reset=False)
        U, mu, squared = self._local(X, self._point())
        c = self.intercept_hidden_
        mean_logit = mu @ self.components_ + self.intercept_visible_
        xi = np.sqrt(np.maximum(squared, 0.0))
        log_cosh = 0.5 * xi + np.log1p(np.exp(-xi)) if xi.size else xi
        visible = np.sum(U * mean_logit - log_cosh, axis=1)
        hidden = mu @ c + special.log_expit(-c).sum()
        return visible + hidden + _bernoulli_entropy(mu)

    def score_samples(self, X):
        """Importance-sampled estimate of ``log p(v)`` of each row.

        ``log (1/S) sum_s p(v, h_s) / r(h_s)`` with ``S =
        n_importance_samples`` draws from ``r``, the mean-field ``q(h | v)``
        at the posterior-mean parameters mixed with a fair coin (weight
        0.05 per unit). Its expectation is a lower bound on ``log p(v)``
        that tightens as ``S`` grows. The draws come from ``random_state``
        and are shared by all rows, so each row's estimate depends on that
        row only.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary rows.

        Returns
        -------
        log_likelihood : ndarray of shape (n_samples,)
            Estimated ``log p(v)``, in nats.
        """
        check_is_fitted(self)
        X = self._check_X(X, reset=False)
        U, mu, _ = self._local(X, self._point())
        proposal = (1.0 - 2.0 * _PROPOSAL_MIXING) * mu + _PROPOSAL_MIXING
        rng = check_random_state(self.random_state)
        uniforms = rng.uniform(size=(self.n_importance_samples, self.n_components))
        out = np.empty(X.shape[0])
        kernels.importance_log_likelihood(
            U + 0.5,
            proposal,
            uniforms,
            np.ascontiguousarray(self.components_.T),
            self.intercept_visible_,
            self.intercept_hidden_,
            out,
        )
        return out

    def score(self, X, y=None):
        """Mean importance-sampled log-likelihood of the rows (nats per row).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Binary rows.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        score : float
            The mean of :meth:`score_samples`.
        """
        return float(np.mean(self.score_samples(X)))

    def sample(self, n_samples=1, *, random_state=None):
        """Draw binary rows from the fitted network (ancestral sampling).

        ``h_k ~ Bernoulli(sigmoid(c_k))``, then ``v_j ~ Bernoulli(sigmoid(W[:,
        j]' h + b_j))``, at the posterior-mean parameters.

        Parameters
        ----------
        n_samples : int, default=1
            Number of rows.
        random_state : int, RandomState instance or None, default=None
            Seed of the draws.

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
            Binary rows (float64 zeros and ones).
        """
        check_is_fitted(self)
        rng = check_random_state(random_state)
        hidden = rng.uniform(size=(n_samples, self.n_components)) < special.expit(
            self.intercept_hidden_
        )
        logits = hidden @ self.components_ + self.intercept_visible_
        return (rng.uniform(size=logits.shape) < special.expit(logits)).astype(
            np.float64
        )
