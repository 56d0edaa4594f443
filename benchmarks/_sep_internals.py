"""The one place where bench_sep reads or changes DPSEPRegressor's private parts.

The noise and floor sections need what the estimator's public API does not
give: the posterior's natural parameters before the shrinkage of noisy means,
the privacy noise in them, the fitted model's prior and sites, the noise of
the averaged factor from the accountant's schedule, and a fit started from a
given factor (an oracle). Every such access is a function of this module, so
that a change of ``skprivfact/sep.py`` breaks this file alone, and each
function says what public hook of ``sep.py`` would replace it:

- ``posterior_natural_params_`` and ``posterior_noise_std_`` fitted
  attributes (now ``_posterior`` and ``_posterior_noise``);
- the fitted model object (e.g. ``fitted_model_``), with public ``n_weights``,
  ``prior()`` and ``sites(X, y, cavity)`` (now ``_model``);
- ``factor_noise_std`` as a public function (now ``sep._factor_noise_std``);
- a start factor for the network, e.g. ``init="custom"`` with
  ``fit(X, y, init_factor=...)`` as NMF's ``W``/``H`` (now the class
  attribute ``sep._NetworkModel.initial_factor`` is replaced for the block);
- the fixed tuning constants of ``mean_update="adam"`` (its warm-up share and
  the weight of the precision sites: module constants of ``sep.py``, replaced
  for the block), so that the validation runs that chose them can be
  repeated; no option is wanted for them;
- the variances at which the Adam phase computes its sites (a probe,
  ``adam_site_variance_scale``: ``sep._AdamMeans._cavity`` is replaced for
  the block); its limit at 0 is the option ``adam_sites="means"``.
"""

import contextlib
import copy

from skprivfact import sep as _sep


def factor_noise_std(noise_std, decay, n_steps, first_averaged):
    """Std of the noise in one coordinate of the running and the averaged factor.

    Public hook wanted: ``sep.factor_noise_std``.
    """
    return _sep._factor_noise_std(noise_std, decay, n_steps, first_averaged)


def posterior_natural_params(estimator):
    """The fitted posterior's natural parameters, before the estimator's
    shrinkage of noisy means. Public hook wanted: ``posterior_natural_params_``."""
    return estimator._posterior


def posterior_noise_std(estimator):
    """Std of the privacy noise in each natural parameter of the posterior.
    Public hook wanted: ``posterior_noise_std_``."""
    return estimator._posterior_noise


def weight_precisions(estimator):
    """The posterior precision of each weight (natural parameters, no shrinkage)."""
    return posterior_natural_params(estimator)[: estimator._model.n_weights]


def fitted_factor(estimator, n_samples):
    """The fitted factor f = (posterior - prior) / n. Public hook wanted:
    ``model_.prior()``."""
    return (posterior_natural_params(estimator) - estimator._model.prior()) / n_samples


def site_values(estimator, X_scaled, y_scaled, n_samples):
    """The sites of scaled rows at the cavity prior + (n - 1) f of the fitted
    factor f. Public hook wanted: ``model_.sites``."""
    model = estimator._model
    cavity = model.prior() + (n_samples - 1) * fitted_factor(estimator, n_samples)
    return model.sites(X_scaled, y_scaled, cavity)


def with_posterior_noise(estimator, noise_std, random_state):
    """A copy of a noise-free network fit whose posterior natural parameters
    carry Gaussian noise of std ``noise_std``, on the optimistic side: weights
    whose noisy precision falls below the prior keep their clean natural
    parameters (a private fit keeps their previous, noisy ones) and the noise
    Gamma stays clean. Prediction then shrinks the noisy means as a private
    fit's are. Public hook wanted: settable ``posterior_natural_params_`` and
    ``posterior_noise_std_``."""
    noisy = copy.deepcopy(estimator)
    clean = posterior_natural_params(estimator)
    n_weights = estimator._model.n_weights
    posterior = clean + random_state.normal(scale=noise_std, size=clean.size)
    rejected = posterior[:n_weights] < estimator._model.prior()[:n_weights]
    for block in (slice(0, n_weights), slice(n_weights, 2 * n_weights)):
        posterior[block][rejected] = clean[block][rejected]
    posterior[-2:] = clean[-2:]
    noisy._posterior = posterior
    noisy._posterior_noise = noise_std
    return noisy


@contextlib.contextmanager
def network_start(factor):
    """Within the block, every network fit starts from ``factor`` instead of its
    data-independent random start (an oracle when ``factor`` comes from the
    data: a private fit cannot know it). Public hook wanted: a start factor
    given to ``fit`` (``init="custom"``)."""
    original = _sep._NetworkModel.initial_factor
    _sep._NetworkModel.initial_factor = lambda self, random_state, n_samples: (
        factor.copy()
    )
    try:
        yield
    finally:
        _sep._NetworkModel.initial_factor = original


# Module constants of sep.py that bench_sep_dpsgd.py's --explore-sep may set:
# the ones whose values its comments justify by validation RMSE and that no
# constructor argument reaches.
TUNABLE_CONSTANTS = (
    "_ADAM_WARMUP_FRACTION",
    "_ADAM_PRECISION_WEIGHT",
    "_ADAM_MEANS_PRECISION_WEIGHT",
)


@contextlib.contextmanager
def adam_site_variance_scale(scale):
    """Within the block, the Adam phase of ``mean_update="adam"`` computes
    each row's sites at its cavity with the weights' variances times
    ``scale``, their means unchanged (1: the fit as it is). Towards 0 the
    released gradient tends to that of the Gaussian log-likelihood at the
    means (noise variance fixed by the warm-up), and each precision site to
    the diagonal Gauss-Newton term ``(d mu / d w)**2 / sigma**2``: a probe of
    whether sites at the means should replace the sites at the cavity.
    The limit is close to the option ``adam_sites="means"``, which also
    drops the warm-up and takes the noise variance from the prior instead of
    the warm-up; the probe reaches the values in between. Public hook
    wanted: none."""
    original = _sep._AdamMeans._cavity

    def cavity(self, n_weights):
        natural = original(self, n_weights)
        # Precision and precision times mean: variances times scale, same means.
        natural[: 2 * n_weights] /= scale
        return natural

    _sep._AdamMeans._cavity = cavity
    try:
        yield
    finally:
        _sep._AdamMeans._cavity = original


# Probes --explore-sep may set beside the constants, by key: each changes how
# the fit computes something rather than a constant's value.
PROBES = {"_ADAM_SITE_VARIANCE_SCALE": adam_site_variance_scale}


@contextlib.contextmanager
def sep_constants(**values):
    """Within the block, the named constants of ``sep.py`` (a subset of
    ``TUNABLE_CONSTANTS``) and probes (``PROBES``) take the given values, each
    a number in (0, 1]. Public hook wanted: none for the constants, the
    defaults' own tuning; a probe becomes an option or a default once the
    whole benchmark has measured it."""
    unknown = sorted(set(values) - set(TUNABLE_CONSTANTS) - set(PROBES))
    if unknown:
        raise ValueError(
            f"not a tunable constant or probe of sep.py: {', '.join(unknown)}; "
            f"choose among {', '.join([*TUNABLE_CONSTANTS, *PROBES])}"
        )
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            0 < value <= 1
        ):
            raise ValueError(f"{name} must be a number in (0, 1], got {value!r}")
    constants = {name: value for name, value in values.items() if name in TUNABLE_CONSTANTS}
    original = {name: getattr(_sep, name) for name in constants}
    try:
        with contextlib.ExitStack() as probes:
            for name, value in values.items():
                if name in PROBES:
                    probes.enter_context(PROBES[name](float(value)))
            for name, value in constants.items():
                setattr(_sep, name, float(value))
            yield
    finally:
        for name, value in original.items():
            setattr(_sep, name, value)
