"""Fixtures shared by several test modules (a module's own fixture of the same name overrides them)."""

import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler


@pytest.fixture(scope="session")
def cancer():
    """Breast cancer (569 x 30), standardised features and 0/1 float targets."""
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y.astype(float)
