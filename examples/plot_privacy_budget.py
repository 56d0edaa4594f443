"""
=========================================================
Tuning epsilon under one privacy budget with GridSearchCV
=========================================================

Every fit on a private dataset spends privacy, including the fits a grid
search makes to choose a hyperparameter: cross-validating three values of
``epsilon`` over three folds fits the same records ten times (with the
refit), and the ``privacy_spent_`` of the best estimator covers only the
last of them. A :class:`~skprivfact.privacy.PrivacyBudget` passed as
``budget=`` counts them all: ``clone`` (and so ``GridSearchCV``) shares it
instead of copying it, every release of every fit is charged to it, and a fit
that would take the total beyond it is refused once its input is validated,
before anything is released or charged.

The data are scikit-learn's bundled breast-cancer set, each row scaled by
bounds that are public (the feature ranges of the data's documentation would
do; here a fixed per-feature scale) and clipped to norm 1 by the estimator.
"""

# %%
# A search that fits within the budget
# ------------------------------------

import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_breast_cancer
from sklearn.model_selection import GridSearchCV

from skprivfact import DPBayesLogReg
from skprivfact.exceptions import PrivacyBudgetExceededError
from skprivfact.privacy import PrivacyBudget

X, y = load_breast_cancer(return_X_y=True)
# A public, data-independent scale per feature (powers of ten), then rows of
# norm at most about 1 after the estimator's clipping.
X = X / 10.0 ** np.ceil(np.log10(X.max(axis=0) + 1e-12)) / np.sqrt(X.shape[1])

epsilons = [0.5, 1.0, 2.0]
budget = PrivacyBudget(epsilon=25.0, delta=1e-5)
search = GridSearchCV(
    DPBayesLogReg(data_norm=1.0, budget=budget),
    {"epsilon": epsilons},
    cv=3,
    scoring="roc_auc",
    error_score="raise",  # a refusal must stop the search, not score it as nan
).fit(X, y)

print(f"fits charged: {budget.n_fits}")
print(f"best epsilon: {search.best_params_['epsilon']}")
print(f"privacy_spent_ of the best estimator: {search.best_estimator_.privacy_spent_[0]:.2f}")
print(f"total spent on the dataset:            {budget.spent[0]:.2f}")

# %%
# The per-fit figure hides most of the cost: the budget holds the total over
# the ten fits, composed by the accountant (less than the sum of the ten
# epsilons, which is what simple composition would charge).

naive_sum = 3 * sum(epsilons) + search.best_params_["epsilon"]
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.bar(
    ["best estimator's\nprivacy_spent_", "budget.spent\n(composed)", "sum of the\n10 epsilons"],
    [search.best_estimator_.privacy_spent_[0], budget.spent[0], naive_sum],
    color=["tab:blue", "tab:red", "tab:gray"],
)
ax.axhline(budget.epsilon, color="black", linestyle="--", label="budget epsilon")
ax.set_ylabel("epsilon (delta = 1e-5)")
ax.set_title("What a grid search over epsilon spends")
ax.legend()
fig.tight_layout()
plt.show()

# %%
# A search beyond the budget is refused
# -------------------------------------
#
# With a budget of 8 the same search cannot run to its end: the fit that would
# cross it raises before it touches the data, and what was spent up to then
# stays recorded.

small = PrivacyBudget(epsilon=8.0, delta=1e-5)
try:
    GridSearchCV(
        DPBayesLogReg(data_norm=1.0, budget=small),
        {"epsilon": epsilons},
        cv=3,
        error_score="raise",
    ).fit(X, y)
except PrivacyBudgetExceededError as error:
    print(f"refused: {error}")
print(f"fits charged before the refusal: {small.n_fits}, spent {small.spent[0]:.2f}")
