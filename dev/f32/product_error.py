#!/usr/bin/env python3
"""The error of one float32 product x y made as 3xTF32, by split: the measurements behind
`--three-tf32`'s kThreeTf32ProductSigma (docs/verification.md, "3xTF32 products").

A 3xTF32 product splits each operand into big, a TF32 value, and small = x - big (exact in
float32), itself read as TF32, and sums big_x small_y + small_x big_y + big_x big_y in float32,
dropping small_x small_y. The splits in use differ in how big and small become TF32:

  rna/rna      big and small rounded to nearest (cvt.rna)
  rna/trunc    big rounded, small left as float32 for the tensor core, which truncates it
               (flashref's sm90 kernels; Triton's tf32x3 makes its halves this way too)
  trunc/rna    big truncated, small rounded (CUTLASS's FastF32 default: round_toward_zero big,
               round_half_ulp_truncate small; PyTorch's memory-efficient kernel's float32 path)
  trunc/trunc  both truncated (flashref's `truncated` tuning split; no default uses it)

For each, over N(0, 100) operands: the mean and RMS of the signed relative error (x y's error
over x y) in float32 unit roundoffs u = 2^-24, its quantiles, and its largest magnitude, also
over operands whose mantissas sit just above a power of 2, where small is largest relative to x
(the worst case of the bound). `python3 dev/f32/product_error.py` (about 40 s, numpy only).
"""

import numpy as np

U = 2.0 ** -24
MASK = np.uint32(0xFFFFE000)  # TF32 keeps the top 10 of float32's 23 mantissa bits


def rounded(x):
    b = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((b + np.uint32(0x1000)) & MASK).view(np.float32)


def truncated(x):
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & MASK).view(np.float32)


SPLITS = {
    "rna/rna": (rounded, rounded),
    "rna/trunc": (rounded, truncated),
    "trunc/rna": (truncated, rounded),
    "trunc/trunc": (truncated, truncated),
}


def product(x, y, big, small):
    xb, yb = big(x), big(y)
    xs, ys = small(x - xb), small(y - yb)
    return ((xs * yb + xb * ys) + xb * yb).astype(np.float32)


def relative_error(x, y, f):
    exact = x.astype(np.float64) * y.astype(np.float64)
    return (f(x, y).astype(np.float64) - exact) / exact / U


def main():
    rng = np.random.default_rng(0)
    n = 8_000_000
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    y = (rng.standard_normal(n) * 10).astype(np.float32)
    near = [(1 + rng.random(4_000_000) * 2 ** -4).astype(np.float32) for _ in range(2)]
    print(f"{'split':12} {'mean':>7} {'rms':>6} {'q99':>6} {'q99.99':>7} {'max':>6} {'max near 2^k':>13}")
    rows = [("float32", lambda a, b: a * b)] + [
        (name, lambda a, b, s=s: product(a, b, *s)) for name, s in SPLITS.items()]
    for name, f in rows:
        r = relative_error(x, y, f)
        a = np.abs(r)
        q99, q9999 = np.quantile(a, [0.99, 0.9999])
        worst_near = np.abs(relative_error(near[0], near[1], f)).max()
        print(f"{name:12} {r.mean():+7.2f} {np.sqrt((r * r).mean()):6.2f} {q99:6.2f} {q9999:7.2f} "
              f"{a.max():6.2f} {worst_near:13.2f}")


if __name__ == "__main__":
    main()
