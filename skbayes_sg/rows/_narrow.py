"""Rows gathered from a one-byte copy of integer-valued features."""

import numpy as np

from ._array import ArrayRows
from ._source import _nbytes

#: Rows per block of the scan that decides whether X has a one-byte copy (float
#: temporaries of a few MiB whatever D).
_SCAN_ELEMENTS = 2**19


def narrow_copy(X):
    """``X`` as uint8 or int8 when that holds it exactly (integers within a byte's range), else False."""
    if X.dtype.kind != "f" or X.ndim != 2 or X.size == 0:
        return False
    lo, hi = np.inf, -np.inf
    step = max(1, _SCAN_ELEMENTS // X.shape[1])
    for start in range(0, X.shape[0], step):
        B = X[start : start + step]
        lo, hi = min(lo, float(B.min())), max(hi, float(B.max()))
        if lo < -128 or hi > 255 or (lo < 0 and hi > 127) or not np.array_equal(B, np.floor(B)):
            return False
    return X.astype(np.uint8 if lo >= 0 else np.int8, order="C")


class ByteRows(ArrayRows):
    """Rows of dense float ``X`` gathered from a copy in one byte a feature, when exact.

    One-hot, binary and small count features (a9a's, say) are exact in a byte, and a
    random minibatch's gather then reads an eighth of the memory: on a9a at batch 500 it
    took a third of an SGHMC step and more when other processes compete for memory
    bandwidth. The rows cast back to X's dtype are X's rows bit for bit, so nothing
    computed from them changes. Decided on the first gather by a scan of X in blocks;
    costs N D bytes (an eighth of float64 X). Full-data blocks are views of X itself.
    """

    #: The one-byte copy, False once X is known to have none, None before the scan.
    narrow = None

    @property
    def nbytes(self):
        return super().nbytes + _nbytes(self.narrow)

    def gather_source(self):
        """The one-byte copy that gathers read, or None (gathers then read X)."""
        narrow = self.narrow
        if narrow is None:
            narrow = self.narrow = narrow_copy(self.X)
        return None if narrow is False else narrow

    def _gather_features(self, idx):
        narrow = self.gather_source()
        if narrow is None:
            return np.take(self.X, idx, axis=0)
        return np.take(narrow, idx, axis=0).astype(self.X.dtype)
