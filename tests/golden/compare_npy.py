#!/usr/bin/python3
"""Compare two logits files [T, vocab] (float32/float64 .npy): max abs error and argmax agreement.

  /usr/bin/python3 tests/golden/compare_npy.py A.npy B.npy [--atol 2e-3]

Fails (exit 1) when the shapes differ, a value is not finite, the max abs error exceeds --atol,
or a row's argmax differs although both files prefer their own choice by more than 2·atol (a
disagreement inside that margin is a near-tie, not a bug; with max abs error ≤ atol it cannot
happen, so the argmax line is informative). Exit 2 on usage errors.
"""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--atol", type=float, default=2e-3)
    args = ap.parse_args()
    a = np.load(args.a).astype(np.float64)
    b = np.load(args.b).astype(np.float64)
    if a.ndim == 1:
        a = a[None]
    if b.ndim == 1:
        b = b[None]
    if a.shape != b.shape:
        print(f"FAIL: shapes differ: {a.shape} vs {b.shape}")
        return 1
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        print("FAIL: non-finite values")
        return 1
    diff = np.abs(a - b)
    max_abs = float(diff.max())
    worst_row, worst_col = np.unravel_index(int(diff.argmax()), diff.shape)
    arg_a, arg_b = a.argmax(-1), b.argmax(-1)
    rows = np.arange(a.shape[0])
    # how much each file prefers its own choice over the other's
    margin = np.minimum(a[rows, arg_a] - a[rows, arg_b], b[rows, arg_b] - b[rows, arg_a])
    mismatched = arg_a != arg_b
    significant = mismatched & (margin > 2 * args.atol)
    print(f"rows {a.shape[0]}, vocab {a.shape[1]}: max abs error {max_abs:.3g} at [{worst_row}, {worst_col}] "
          f"(atol {args.atol:g}), mean abs {float(diff.mean()):.3g}, |A| max {float(np.abs(a).max()):.3g}")
    print(f"argmax agreement {int((~mismatched).sum())}/{a.shape[0]} rows"
          + (f"; mismatches at rows {rows[mismatched].tolist()[:20]} (margins "
             f"{[round(float(m), 6) for m in margin[mismatched][:20]]})" if mismatched.any() else ""))
    failed = max_abs > args.atol or significant.any()
    print("FAIL" if failed else "OK")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
