"""Test-wide settings.

Every test runs inside :func:`skprivfact.privacy.reproducible_noise`, so that
private fits are repeatable (scikit-learn's common checks fit twice with the
same ``random_state`` and compare). Tests of the real, secret randomness of
releases opt out with ``@pytest.mark.secret_noise``.
"""

from collections import namedtuple

import pytest

from skprivfact import mechanisms
from skprivfact.privacy import reproducible_noise

DiscreteGaussianCall = namedtuple("DiscreteGaussianCall", "sigma random_state")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "secret_noise: run without reproducible_noise(), with the operating "
        "system's randomness for every release",
    )


@pytest.fixture(autouse=True)
def _reproducible_releases(request):
    if request.node.get_closest_marker("secret_noise"):
        yield
        return
    with reproducible_noise(20261124):
        yield


@pytest.fixture
def discrete_gaussian_calls(monkeypatch):
    """Every draw of the secure sampler: its std (in grid steps) and randomness."""
    calls = []
    original = mechanisms.discrete_gaussian

    def recording(sigma, size=None, *, random_state=None):
        calls.append(DiscreteGaussianCall(sigma, random_state))
        return original(sigma, size, random_state=random_state)

    monkeypatch.setattr(mechanisms, "discrete_gaussian", recording)
    return calls
