"""One progress bar across all chains: tqdm when installed, a plain line otherwise."""

import sys
import time
from contextlib import contextmanager


class _PlainBar:
    """A one-line stand-in for tqdm: iterations done, rate and time left, on stderr."""

    def __init__(self, total, desc, file=None, unit="iterations"):
        self.total, self.desc, self.n, self.unit = total, desc, 0, unit
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
        per = "it" if self.unit == "iterations" else self.unit
        self.file.write(f"\r{self.desc}: {self.n}/{self.total} {self.unit} ({pct:3.0f}%), {rate:,.0f} {per}/s, {eta}")
        self.file.flush()

    def close(self):
        self.file.write("\n")
        self.file.flush()


def _make_bar(total, desc, unit):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _PlainBar(total, desc, unit=unit)
    return tqdm(total=total, desc=desc, unit=" " + unit if unit != "iterations" else "it", file=sys.stderr)


@contextmanager
def progress_bar(total, desc, unit="iterations"):
    """Context manager yielding a bar of ``unit`` with ``update(n)`` and a settable ``total``; closed on exit."""
    bar = _make_bar(total, desc, unit)
    try:
        yield bar
    finally:
        bar.close()
