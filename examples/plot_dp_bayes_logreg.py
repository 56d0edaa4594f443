"""
=============================================================
Private Bayesian logistic regression: utility and calibration
=============================================================

:class:`~skprivfact.DPBayesLogReg` fits a Bayesian logistic
regression by variational Bayes with Polya-Gamma augmentation, and makes it
(epsilon, delta)-differentially private by releasing, at each iteration, the
two expected sufficient statistics of the data (a vector and a symmetric
matrix) together as one Gaussian mechanism (Park et al., VIPS, 2020). Rows are
clipped to a norm bound ``data_norm`` fixed in advance, which bounds what one
record can change.

This example traces the test AUC against epsilon, and compares the
calibration of the posterior predictive probabilities of a private and a
non-private fit. It uses the UCI Adult data when a copy is found in the
``adult`` folder of :func:`skprivfact.datasets.get_data_home` and a synthetic
problem of the same shape otherwise.
"""

# %%
# The data
# --------
#
# Adult: one-hot encoded categorical columns and continuous columns scaled by
# bounds fixed in advance (not read from the data), then every row divided by
# sqrt(13), the largest norm such a row can have, so that ``data_norm=1``
# clips nothing and depends on nothing private.

import math

import matplotlib.pyplot as plt
import numpy as np
from sklearn.calibration import calibration_curve
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import train_test_split

from skprivfact.datasets import get_data_home, load_adult
from skprivfact.logistic import DPBayesLogReg


def make_synthetic(n_samples=30_000, n_features=40, seed=0):
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n_samples, n_features)) / math.sqrt(2 * n_features)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, np.newaxis]
    logits = X @ (4.0 * rng.normal(size=n_features)) - 1.0
    y = (rng.uniform(size=n_samples) < 1 / (1 + np.exp(-logits))).astype(int)
    return X, y, "synthetic"


adult = get_data_home() / "adult" / "adult.data"
X, y, name = (*load_adult(adult), "Adult") if adult.exists() else make_synthetic()
X_train, X_test, y_train, y_test = train_test_split(
    X, y, test_size=0.2, stratify=y, random_state=0
)
print(f"{name}: {X_train.shape[0]} training rows, {X.shape[1]} features")

# %%
# AUC against epsilon
# -------------------
#
# Each fit runs 10 full-batch iterations; the noise multiplier is calibrated so
# that the 10 releases spend exactly the budget (``privacy_spent_``), with
# ``delta = 1e-5``. ``epsilon=inf`` runs the same algorithm without noise.

epsilons = [0.1, 1.0, 10.0]
aucs, fitted = [], {}
for epsilon in epsilons + [float("inf")]:
    clf = DPBayesLogReg(epsilon=epsilon, data_norm=1.0, random_state=0)
    clf.fit(X_train, y_train)
    fitted[epsilon] = clf
    aucs.append(roc_auc_score(y_test, clf.predict_proba(X_test)[:, 1]))
    print(
        f"epsilon={epsilon:<5}: AUC {aucs[-1]:.4f}, noise multiplier "
        f"{clf.noise_multiplier_:.3g}, epsilon spent {clf.privacy_spent_[0]:.3g}"
    )

fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(epsilons, aucs[:-1], "o-", label="DPBayesLogReg")
ax.axhline(aucs[-1], color="gray", linestyle="--", label="no noise")
ax.set_xscale("log")
ax.set_xlabel(r"$\epsilon$ ($\delta = 10^{-5}$)")
ax.set_ylabel("test AUC")
ax.set_title(f"Privacy-utility on {name}")
ax.legend()
fig.tight_layout()

# %%
# Calibration of the posterior predictive
# ---------------------------------------
#
# ``predict_proba`` integrates the logistic function over the Gaussian
# posterior of the logit rather than plugging in the posterior mean; the
# posterior mean and standard deviation of the logit are what ``transform``
# returns. A calibration curve groups the test rows by predicted probability
# and compares with the observed frequency of the positive class.

fig, ax = plt.subplots(figsize=(5, 5))
ax.plot([0, 1], [0, 1], color="gray", linestyle=":", label="perfect")
for epsilon, label in [(float("inf"), "no noise"), (1.0, r"$\epsilon = 1$")]:
    proba = fitted[epsilon].predict_proba(X_test)[:, 1]
    observed, predicted = calibration_curve(y_test, proba, n_bins=10)
    ax.plot(predicted, observed, "o-", label=label)
ax.set_xlabel("predicted probability")
ax.set_ylabel("observed frequency")
ax.set_title("Calibration")
ax.legend()
fig.tight_layout()

moments = fitted[1.0].transform(X_test[:3])
print("posterior mean and std of the logit (epsilon = 1):")
print(moments.round(3))
plt.show()
