"""Input validation shared by the estimators and the ArviZ export."""

import numpy as np
from sklearn.utils.validation import validate_data as _sklearn_validate_data


def validate_data(*args, **kwargs):
    """scikit-learn's ``validate_data``, without numpy's RuntimeWarning on X holding both
    ``inf`` and ``-inf``: sklearn's finiteness check first sums X (``inf - inf`` is NaN,
    "invalid value encountered in reduce"), then raises its own ValueError naming the
    infinity, which says all there is to say. A DataFrame without columns gets sklearn's
    error for an array without columns."""
    X = args[1] if len(args) > 1 else kwargs.get("X")
    if hasattr(X, "columns") and len(X.columns) == 0:
        # sklearn fails on a DataFrame without columns with numpy's "at least one array or
        # dtype is required"; this is sklearn's message for the same array.
        raise ValueError(
            f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is required by "
            f"{type(args[0]).__name__}."
        )
    with np.errstate(invalid="ignore", over="ignore"):
        return _sklearn_validate_data(*args, **kwargs)
