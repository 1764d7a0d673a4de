"""One progress bar across all chains: tqdm when installed, a plain line otherwise."""

import sys
import time
from contextlib import contextmanager


class _PlainBar:
    """A one-line stand-in for tqdm: iterations done, rate and time left, on stderr."""

    def __init__(self, total, desc, file=None):
        self.total, self.desc, self.n = total, desc, 0
        self.file = sys.stderr if file is None else file
        self.start = time.perf_counter()
        self._write()

    def update(self, n):
        self.n += n
        self._write()

    def _write(self):
        elapsed = time.perf_counter() - self.start
        rate = self.n / elapsed if elapsed > 0 and self.n else 0.0
        left = (self.total - self.n) / rate if rate else float("nan")
        pct = 100.0 * self.n / self.total if self.total else 100.0
        eta = f"{left:.1f} s left" if left == left else "-- s left"
        self.file.write(f"\r{self.desc}: {self.n}/{self.total} iterations ({pct:3.0f}%), {rate:,.0f} it/s, {eta}")
        self.file.flush()

    def close(self):
        self.file.write("\n")
        self.file.flush()


def _make_bar(total, desc):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _PlainBar(total, desc)
    return tqdm(total=total, desc=desc, unit="it", file=sys.stderr)


@contextmanager
def progress_bar(total, desc):
    """Context manager yielding a bar with ``update(n)``; closed on exit."""
    bar = _make_bar(total, desc)
    try:
        yield bar
    finally:
        bar.close()
