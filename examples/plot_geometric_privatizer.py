"""
=========================================
Privatizing counts with geometric noise
=========================================

:class:`~skprivfact.GeometricPrivatizer` releases a count matrix with fresh
two-sided geometric noise added to every entry,

.. math::

    P(\\tau = t) = \\frac{1 - \\alpha}{1 + \\alpha}\\, \\alpha^{|t|},
    \\qquad \\alpha = \\exp(-\\epsilon / N),

which makes the release (N, epsilon)-limited-precision locally private: two
count matrices within L1 distance ``N`` (the ``sensitivity``) produce any
output with probabilities within a factor :math:`e^\\epsilon`.

This example privatizes a synthetic Poisson count matrix at several values of
epsilon, compares the noise actually added with the exact pmf above, and
checks the mean absolute noise against its expected value
:math:`2\\alpha / (1 - \\alpha^2)`.
"""

# %%
# A synthetic count matrix
# ------------------------
#
# Counts from a low-rank Poisson model, as in topic modelling: 500 documents
# (rows) and 200 words (columns), with gamma-distributed factors
# (:func:`~skprivfact.datasets.make_poisson_factorization`).

import matplotlib.pyplot as plt
import numpy as np

from skprivfact import GeometricPrivatizer
from skprivfact.accounting import geometric_alpha
from skprivfact.datasets import make_poisson_factorization

counts, _, _, _ = make_poisson_factorization(
    n_samples=500, n_features=200, n_components=5, factor_shape=0.5, random_state=0
)
print(f"{counts.shape[0]} x {counts.shape[1]} counts, mean {counts.mean():.2f}, "
      f"{(counts == 0).mean():.0%} zeros")

# %%
# Privatizing at several epsilons
# -------------------------------
#
# Each call to ``fit_transform`` is one release. The output is an integer
# matrix of the same shape; entries can be negative, because the noise is
# symmetric around zero.

epsilons = [0.5, 1.0, 2.0, 4.0]
noise = {}
for epsilon in epsilons:
    privatizer = GeometricPrivatizer(epsilon=epsilon, random_state=0)
    noisy_counts = privatizer.fit_transform(counts)
    noise[epsilon] = noisy_counts - counts
    print(
        f"epsilon = {epsilon}: dtype {noisy_counts.dtype}, "
        f"{(noisy_counts < 0).mean():.1%} negative entries, "
        f"noise std {noise[epsilon].std():.2f}"
    )

# %%
# The noise against the exact pmf
# -------------------------------
#
# The empirical distribution of the added noise (100,000 draws per epsilon)
# matches the two-sided geometric pmf: smaller epsilon means larger ``alpha``
# and heavier tails.

fig, axes = plt.subplots(1, len(epsilons), figsize=(12, 3.2), sharey=True)
for ax, epsilon in zip(axes, epsilons):
    alpha = geometric_alpha(epsilon)
    values, frequencies = np.unique(noise[epsilon], return_counts=True)
    support = np.arange(-12, 13)
    pmf = (1 - alpha) / (1 + alpha) * alpha ** np.abs(support)
    ax.bar(values, frequencies / noise[epsilon].size, width=0.8, color="C0",
           alpha=0.6, label="added noise")
    ax.plot(support, pmf, "o-", color="C3", markersize=3, label="exact pmf")
    ax.set_xlim(-12.5, 12.5)
    ax.set_yscale("log")
    ax.set_ylim(1e-5, 1)
    ax.set_title(rf"$\epsilon$ = {epsilon}, $\alpha$ = {alpha:.3f}")
    ax.set_xlabel("noise")
axes[0].set_ylabel("frequency")
axes[0].legend(loc="lower center")
fig.tight_layout()

# %%
# Mean absolute noise against epsilon
# -----------------------------------
#
# The expected absolute noise per entry is :math:`2\alpha / (1 - \alpha^2)`.
# :meth:`~skprivfact.GeometricPrivatizer.score` returns minus this value: it
# does not look at the data, so it can be used to compare privacy levels
# without spending any budget. With ``sensitivity=N`` the same curve is
# reached at ``N`` times the epsilon.

epsilon_grid = np.geomspace(0.1, 5.0, 15)
measured, scores = [], []
for epsilon in epsilon_grid:
    privatizer = GeometricPrivatizer(epsilon=epsilon, random_state=0).fit(counts)
    measured.append(np.abs(privatizer.transform(counts) - counts).mean())
    scores.append(privatizer.score(counts))

fine_grid = np.geomspace(0.1, 5.0, 200)
alpha = np.exp(-fine_grid)
expected = 2 * alpha / (1 - alpha**2)

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(fine_grid, expected, color="C3", label=r"$2\alpha / (1 - \alpha^2)$")
ax.plot(epsilon_grid, measured, "o", color="C0", label="measured")
ax.plot(epsilon_grid, -np.asarray(scores), "x", color="k", label="minus score")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel(r"$\epsilon$ (sensitivity 1)")
ax.set_ylabel("mean absolute noise per entry")
ax.legend()
fig.tight_layout()
plt.show()
