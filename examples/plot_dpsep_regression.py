"""
=====================================================================
Private Bayesian neural network regression with stochastic EP
=====================================================================

:class:`~skprivfact.DPSEPRegressor` fits a Bayesian regression model by
stochastic expectation propagation (SEP): one global factor stands for the
average likelihood of a row, and each update moment-matches the sites of a
random batch of rows at the cavity and moves the factor towards their mean.
Made (epsilon, delta)-differentially private, each row's site is clipped to a
norm ``clip_norm``, and Gaussian noise scaled to what one row can change is
added to the factor at every update; an accountant adds up the privacy spent.
Under noise the network's weight means move by Adam on released, clipped
gradients (``mean_update="adam"``, the private network's default), where the
plain SEP update (``mean_update="sep"``) would put the noise in every
weight's mean.

This example fits a network with one hidden layer of ReLU units
(``model="mlp"``, moments propagated as in probabilistic backpropagation) to a
one-dimensional problem, and compares the predictive mean and uncertainty
bands of a private and a non-private fit; then it traces the test RMSE
against epsilon on a five-dimensional generated problem. Both data sets are
generated here.
"""

# %%
# A one-dimensional problem
# -------------------------
#
# The inputs lie in [-3, 3] and the target in [-3, 3]: these ranges are known
# before seeing the data, so they are passed as ``bounds_X`` and ``bounds_y``.
# The private fit scales the data with them (an estimate of the data's range
# would itself leak information); the non-private fit (``epsilon=inf``,
# ``clip_norm=None``) uses the same bounds, so that only the privacy
# mechanism differs between the two.

import matplotlib.pyplot as plt
import numpy as np

from skprivfact.sep import DPSEPRegressor


def target_function(x):
    return np.sin(2.0 * x) * np.exp(-0.1 * x**2) + x / 6.0


rng = np.random.RandomState(0)
n_samples = 10_000
x = rng.uniform(-3.0, 3.0, size=n_samples)
y = target_function(x) + 0.2 * rng.normal(size=n_samples)
X = x[:, np.newaxis]
x_grid = np.linspace(-3.0, 3.0, 300)

common = {
    "model": "mlp",
    "hidden_units": 50,
    "max_iter": 20,
    "bounds_X": (-3.0, 3.0),
    "bounds_y": (-3.0, 3.0),
    "random_state": 0,
}
fits = {
    "non-private": DPSEPRegressor(epsilon=float("inf"), clip_norm=None, **common).fit(
        X, y
    ),
    "private, epsilon = 1": DPSEPRegressor(
        epsilon=1.0, clip_norm=1.0, **common
    ).fit(X, y),
}

fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
for ax, (label, reg) in zip(axes, fits.items()):
    mean, std = reg.predict(x_grid[:, np.newaxis], return_std=True)
    ax.scatter(
        x[:500], y[:500], s=3, color="gray", alpha=0.4, label="500 training rows"
    )
    ax.plot(x_grid, target_function(x_grid), "k--", label="true function")
    ax.plot(x_grid, mean, color="C0", label="predictive mean")
    ax.fill_between(
        x_grid,
        mean - 2 * std,
        mean + 2 * std,
        color="C0",
        alpha=0.25,
        label=r"$\pm 2$ std",
    )
    ax.set_title(f"{label} (epsilon spent {reg.privacy_spent_[0]:.3g})")
    ax.set_xlabel("x")
    ax.set_ylim(-3.0, 3.0)
    print(
        f"{label:>24}: noise multiplier {reg.noise_multiplier_:.3g}, privacy spent "
        f"{reg.privacy_spent_}, noise std {np.sqrt(reg.noise_variance_):.3g} (true 0.2)"
    )
axes[0].set_ylabel("y")
axes[0].legend(loc="lower right", fontsize="small")
fig.tight_layout()

# %%
# The bands combine the posterior uncertainty of the weights with the inferred
# observation noise, which the private fit takes from one more release: the
# mean squared residual of its fitted means, each row's clipped.
#
# Test RMSE against epsilon
# -------------------------
#
# Friedman's first function of five inputs in [0, 1]: ``10 sin(pi x1 x2) +
# 20 (x3 - 1/2)^2 + 10 x4 + 5 x5`` plus Gaussian noise of standard deviation 1.
# Its range, [0, 30] before noise, follows from the formula; ``bounds_y``
# widens it by the noise. Each fit runs 10 passes; the noise multiplier is
# calibrated so that all of its releases spend exactly the budget. Both
# updates of the means are traced.

from sklearn.datasets import make_friedman1
from sklearn.model_selection import train_test_split

X, y = make_friedman1(n_samples=12_000, n_features=5, noise=1.0, random_state=0)
X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=2_000, random_state=0
)

epsilons = [0.3, 1.0, 3.0, 10.0]
rmses = {"adam": [], "sep": []}
for mean_update, curve in rmses.items():
    for epsilon in epsilons:
        reg = DPSEPRegressor(
            model="mlp",
            mean_update=mean_update,
            hidden_units=50,
            epsilon=epsilon,
            clip_norm=1.0,
            max_iter=10,
            bounds_X=(0.0, 1.0),
            bounds_y=(-5.0, 35.0),
            random_state=0,
        ).fit(X_train, y_train)
        curve.append(np.sqrt(np.mean((reg.predict(X_test) - y_test) ** 2)))
        print(
            f"{mean_update:>4}, epsilon={epsilon:<4}: test RMSE {curve[-1]:.3f}, noise "
            f"multiplier {reg.noise_multiplier_:.3g}, privacy_spent_ {reg.privacy_spent_}"
        )
reg = DPSEPRegressor(
    model="mlp",
    hidden_units=50,
    epsilon=float("inf"),
    clip_norm=None,
    max_iter=10,
    bounds_X=(0.0, 1.0),
    bounds_y=(-5.0, 35.0),
    random_state=0,
).fit(X_train, y_train)
no_noise = np.sqrt(np.mean((reg.predict(X_test) - y_test) ** 2))
print(f"no noise: test RMSE {no_noise:.3f}")

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(epsilons, rmses["adam"], "o-", label='mean_update="adam" (default)')
ax.plot(epsilons, rmses["sep"], "s-", label='mean_update="sep"')
ax.axhline(
    no_noise, color="gray", linestyle="--", label=r"$\epsilon = \infty$ (no noise)"
)
ax.axhline(np.std(y_test), color="gray", linestyle=":", label="predicting the mean")
ax.set_xscale("log")
ax.set_xlabel(r"$\epsilon$ ($\delta = 10^{-5}$)")
ax.set_ylabel("test RMSE")
ax.set_title("Privacy-utility on Friedman #1 (10,000 training rows)")
ax.legend()
fig.tight_layout()
plt.show()
