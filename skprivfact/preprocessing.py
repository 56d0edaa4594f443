"""Local privatization of count data with the geometric mechanism."""

import math

import numpy as np
import scipy.sparse as sp
from sklearn.base import OneToOneFeatureMixin, TransformerMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .base import LocalPrivacyEstimator
from .mechanisms import _check_geometric_params, two_sided_geometric
from .utils._validation import check_count_matrix, check_no_fit_params

__all__ = ["GeometricPrivatizer"]



class GeometricPrivatizer(
    OneToOneFeatureMixin, TransformerMixin, LocalPrivacyEstimator
):
    """Privatize non-negative integer counts with two-sided geometric noise.

    Privacy: each entry y of ``X`` is released as y + tau, with tau drawn
    independently from the two-sided geometric distribution 2Geo(alpha),
    P(tau = t) = (1 - alpha) / (1 + alpha) * alpha**|t|, alpha =
    exp(-epsilon / sensitivity). This is (N, epsilon)-limited-precision local
    privacy (Schein et al. 2019) with N = ``sensitivity``: for any two rows
    within L1 distance N of each other, the probability of any output differs
    by at most a factor e**epsilon. The guarantee covers each row on its own,
    for one call of :meth:`transform`; rows further apart than N are protected
    with a guarantee that degrades gracefully (e**(epsilon * d / N) at L1
    distance d). Every entry is noised, zeros included, so the output does not
    reveal which counts were zero (the sparsity pattern). Each call of
    :meth:`transform` draws fresh noise: releasing the same data twice spends
    epsilon twice (the two releases compose), and releasing different data with
    the same noise would reveal their difference exactly.

    Read more in :ref:`Privacy guarantees <privacy-local>`.

    Parameters
    ----------
    epsilon : float, default=1.0
        The privacy parameter, positive and finite; smaller is more private
        and noisier. ``epsilon / sensitivity`` must be at least 1e-12.
    sensitivity : int, default=1
        The L1 distance N between rows that the guarantee makes
        indistinguishable, an integer >= 1 (for example the most that one
        event can change a row's counts, in total).
    secure : bool, default=False
        Whether to draw the noise with the exact integer sampler from the
        operating system's cryptographic randomness
        (:func:`~skprivfact.mechanisms.two_sided_geometric` with
        ``secure=True``), for real releases. It is pure Python, much slower
        than the default sampler; ``random_state`` must then be None.
    random_state : int, RandomState instance or None, default=None
        The numpy noise stream of the default sampler. None draws every
        :meth:`transform`'s noise from fresh operating-system entropy (not
        numpy's global state, which a ``np.random.seed`` elsewhere would make
        replayable). An int or RandomState gives a stream created in
        :meth:`fit` that each :meth:`transform` continues, so repeated calls
        draw fresh noise and the whole sequence is reproducible from an int.
        Every :meth:`fit` with the same int restarts the same noise: never
        release two different datasets with the same int seed (their
        difference would be revealed). A RandomState instance is used as is
        and advanced by every call, as in scikit-learn. numpy's sampler is not
        cryptographically secure; use ``secure=True`` for real releases.

    Attributes
    ----------
    alpha_ : float
        The noise ratio exp(-epsilon / sensitivity).

    n_features_in_ : int
        Number of features seen during :term:`fit`.

    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during :term:`fit`. Defined only when `X`
        has feature names that are all strings.

    See Also
    --------
    skprivfact.mechanisms.two_sided_geometric : The noise sampler.

    Notes
    -----
    The output is a dense int64 array even for sparse input: every zero gets
    noise, so there is nothing sparse left to store. float32 input gives int64
    output too: the noisy values are integers, which float32 does not hold
    exactly beyond 2**24. Mind the memory for large
    sparse matrices. Counts must be below 2**53.

    A fitted privatizer holds its noise stream; a copy (``pickle``,
    ``copy.deepcopy``) continues the same stream, so the original and the copy
    draw identical noise.

    References
    ----------
    A. Schein, Z. S. Wu, A. Schofield, M. Zhou and H. Wallach, "Locally Private
    Bayesian Inference for Count Models", ICML 2019.

    Examples
    --------
    >>> import numpy as np
    >>> from skprivfact import GeometricPrivatizer
    >>> X = np.array([[0, 3, 1], [2, 0, 5]])
    >>> privatizer = GeometricPrivatizer(epsilon=2.0, random_state=0)
    >>> X_private = privatizer.fit_transform(X)
    >>> X_private.dtype, X_private.shape
    (dtype('int64'), (2, 3))
    >>> round(privatizer.score(X), 4)
    -0.2757
    """

    _noise_param_names = ("epsilon", "sensitivity", "secure")

    _parameter_constraints: dict = {
        **LocalPrivacyEstimator._parameter_constraints,
        "secure": ["boolean"],
        "random_state": ["random_state"],
    }

    def __init__(self, epsilon=1.0, sensitivity=1, secure=False, random_state=None):
        self.epsilon = epsilon
        self.sensitivity = sensitivity
        self.secure = secure
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, **fit_params):
        """Check the parameters and the data, and start the noise stream.

        Nothing is learned from ``X`` but its number of features (and their
        names), so fitting spends no privacy.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Non-negative integer counts (float arrays with integral values are
            accepted).
        y : Ignored
            Not used, present for API consistency by convention.
        **fit_params : dict
            None accepted: ``sample_weight`` raises a TypeError saying why it
            has no meaning here (fitting learns nothing from the rows).

        Returns
        -------
        self : object
            Fitted privatizer.
        """
        check_no_fit_params(
            self, fit_params,
            "fitting learns nothing from the rows (only the number of features) "
            "and every entry gets the same noise, whatever its row's weight.",
        )
        noise_ratio = _check_geometric_params(self.epsilon, self.sensitivity)
        if self.secure and self.random_state is not None:
            raise ValueError(
                "secure=True draws from the operating system's cryptographic "
                "randomness, which cannot be seeded; set random_state=None "
                f"(got {self.random_state!r})."
            )
        check_count_matrix(X, estimator=self, reset=True)
        self.alpha_ = math.exp(-noise_ratio)
        self._record_noise_params()
        # The secure sampler opens the system's randomness on every call, and
        # so does the numpy one without a seed (fresh entropy, never numpy's
        # global state); a seeded stream lives here so that transform calls
        # continue it.
        seeded = not self.secure and self.random_state is not None
        self._noise_rng = check_random_state(self.random_state) if seeded else None
        return self

    def transform(self, X):
        """Add fresh two-sided geometric noise to every entry of ``X``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Non-negative integer counts, with the features seen in :meth:`fit`.
            Sparse input is densified: zeros get noise too.

        Returns
        -------
        X_private : ndarray of shape (n_samples, n_features), dtype int64
            ``X`` plus independent noise on every entry.

        Raises
        ------
        ValueError
            If ``epsilon``, ``sensitivity`` or ``secure`` changed since
            :meth:`fit` (the noise would not be that of ``alpha_``).
        """
        check_is_fitted(self)
        self._check_noise_params_unchanged()
        X = check_count_matrix(X, estimator=self, reset=False)
        counts = X.toarray() if sp.issparse(X) else X
        counts = np.asarray(counts).astype(np.int64)
        noise = two_sided_geometric(
            self.epsilon,
            self.sensitivity,
            size=counts.shape,
            secure=self.secure,
            random_state=self._noise_rng,
        )
        return counts + noise

    def score(self, X, y=None):
        """Return minus the expected absolute noise per entry (higher is less noisy).

        The score does not depend on ``X`` (only validated, as in
        :meth:`transform`), so using it spends no privacy. For tau ~ 2Geo(alpha),
        E|tau| = 2 (1 - alpha) / (1 + alpha) * sum_{t >= 1} t alpha**t
        = 2 (1 - alpha) / (1 + alpha) * alpha / (1 - alpha)**2
        = 2 alpha / (1 - alpha**2),
        and the score is its negative, so that a grid search over ``epsilon``
        prefers less noise.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Non-negative integer counts, with the features seen in :meth:`fit`.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        score : float
            -2 alpha / (1 - alpha**2).
        """
        check_is_fitted(self)
        self._check_noise_params_unchanged()
        check_count_matrix(X, estimator=self, reset=False)
        noise_ratio = self.epsilon / self.sensitivity
        # 1 - alpha**2 = -expm1(-2 * noise_ratio), accurate for small epsilon.
        return -2.0 * self.alpha_ / -math.expm1(-2.0 * noise_ratio)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        tags.non_deterministic = True
        # The output is int64 whatever the input dtype.
        tags.transformer_tags.preserves_dtype = []
        return tags
