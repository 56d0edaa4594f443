"""Test-wide settings.

Every test runs inside :func:`skprivfact.privacy.reproducible_noise`, so that
private fits are repeatable (scikit-learn's common checks fit twice with the
same ``random_state`` and compare). Tests of the real, secret randomness of
releases opt out with ``@pytest.mark.secret_noise``.
"""

import pytest

from skprivfact.privacy import reproducible_noise


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
