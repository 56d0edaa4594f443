"""
=====================================================================
Private Gaussian mixture clustering with stochastic EP
=====================================================================

:class:`~skprivfact.DPSEPGaussianMixture` infers the means of a mixture of
isotropic Gaussians whose variance and weights are known, as in the mixture
experiments of stochastic expectation propagation (Li et al., 2015) and of
differentially private SEP (Vinaroz and Park, 2022). It keeps one Gaussian
factor per component for a record's average likelihood; each update computes
every record's sites for all components at the cavity, clips each record's
stacked sites to a norm ``clip_norm`` and releases their sum with Gaussian
noise, once per update. The result is a Gaussian posterior over each
component mean, so the uncertainty that privacy adds can be drawn.

This example draws data from four components in two dimensions, fits the
posterior without noise and at several epsilons, and draws each posterior
mean with its 98% credible circle. Then it traces the error of the means
against epsilon for two data set sizes: the privacy noise is the same for
any number of records, so its cost falls as the data grow.
"""

# %%
# The data and the public parameters
# ----------------------------------
#
# The data lie in [-5, 5] on both axes, a range fixed before seeing them:
# it is passed as ``bounds_X`` (records are clipped to it and the initial
# means are drawn inside it, independently of the data). The components'
# variance (0.5 squared) and uniform weights are public too.

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Circle

from skprivfact import DPSEPGaussianMixture

centres = np.array([[-2.5, -1.5], [2.0, -2.5], [1.5, 2.5], [-1.5, 2.0]])


def make_data(n_samples, seed):
    rng = np.random.RandomState(seed)
    labels = rng.randint(len(centres), size=n_samples)
    return centres[labels] + 0.5 * rng.normal(size=(n_samples, 2))


common = {
    "n_components": 4,
    "bounds_X": (-5.0, 5.0),
    "covariance": 0.25,
    "random_state": 0,
}
X = make_data(2000, seed=0)

# %%
# Posterior means and their uncertainty
# -------------------------------------
#
# The 98% credible region of an isotropic Gaussian in two dimensions is a
# circle of radius ``sqrt(7.82)`` standard deviations. Without noise the
# circles are too small to see at this scale (a few hundredths); privacy
# widens them. At epsilon = 1 on 2,000 records the noise swamps the
# components while they are still forming: their noisy means are shrunk
# towards the prior mean (the centre of the bounds) and the fit ends with
# some components near the centre and wide circles, which say how little
# the release tells about them.

fits = {"non-private": DPSEPGaussianMixture(epsilon=float("inf"), clip_norm=None, **common)}
for epsilon in (10.0, 3.0, 1.0):
    fits[f"epsilon = {epsilon:g}"] = DPSEPGaussianMixture(epsilon=epsilon, **common)

radius = np.sqrt(7.82)
fig, axes = plt.subplots(1, len(fits), figsize=(4 * len(fits), 4), sharey=True)
for ax, (name, model) in zip(axes, fits.items()):
    labels = model.fit_predict(X)
    ax.scatter(X[:, 0], X[:, 1], c=labels, s=3, cmap="tab10", vmin=0, vmax=9, alpha=0.4)
    for mean, variance in zip(model.means_, model.means_variance_):
        ax.add_patch(
            Circle(mean, radius * np.sqrt(variance), fill=False, color="k", lw=1.5)
        )
        ax.plot(*mean, "k+", ms=10)
    ax.plot(centres[:, 0], centres[:, 1], "rx", ms=8, label="true means")
    ax.set_title(
        f"{name}\nmean sd {np.sqrt(model.means_variance_).mean():.3f}, "
        f"log-lik {model.score(X):.2f}"
    )
    ax.set_xlim(-5, 5)
    ax.set_ylim(-5, 5)
    ax.set_aspect("equal")
axes[0].legend(loc="lower left")
fig.tight_layout()

# %%
# What privacy costs, against the number of records
# -------------------------------------------------
#
# The error of the means (the largest distance from a posterior mean to its
# true centre, components matched greedily) at each epsilon, the median over
# two fits, for 1,000 and 10,000 records; the test log-likelihood is on
# fresh records.

epsilons = [0.5, 2.0, 10.0]
X_test = make_data(5000, seed=1)


def mean_error(means):
    left = list(range(len(centres)))
    worst = 0.0
    for mean in means:
        distances = [np.linalg.norm(mean - centres[j]) for j in left]
        best = int(np.argmin(distances))
        worst = max(worst, distances[best])
        left.pop(best)
    return worst


fig, (ax_error, ax_ll) = plt.subplots(1, 2, figsize=(10, 4))
for n_samples in (1000, 10_000):
    X_n = make_data(n_samples, seed=2)
    errors, scores = [], []
    for epsilon in epsilons:
        runs = [
            DPSEPGaussianMixture(epsilon=epsilon, **{**common, "random_state": seed}).fit(X_n)
            for seed in range(2)
        ]
        errors.append(np.median([mean_error(m.means_) for m in runs]))
        scores.append(np.median([m.score(X_test) for m in runs]))
    ax_error.plot(epsilons, errors, "o-", label=f"N = {n_samples}")
    ax_ll.plot(epsilons, scores, "o-", label=f"N = {n_samples}")
ax_ll.axhline(
    fits["non-private"].score(X_test), color="k", ls="--", label="non-private, N = 2000"
)
ax_error.set(xscale="log", yscale="log", xlabel="epsilon", ylabel="largest error of a mean")
ax_ll.set(xscale="log", xlabel="epsilon", ylabel="test log-likelihood per record")
ax_error.legend()
ax_ll.legend()
fig.tight_layout()
plt.show()
