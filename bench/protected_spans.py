"""Protected-span finder on hostile long tokens: seconds per 1 MB token, and the growth from 256 KB to 1 MB.

Usage: OMP_NUM_THREADS=1 python bench/protected_spans.py [--mb 1] [--budget 5]

Each case is one token of a repeated unit (letters, a DNA answer, digits, unclosed `\\[`, `\\begin{…}`,
`\\boxed{`, `$`, e-mail-like runs, ...). A linear finder takes about 4x as long on 1 MB as on 256 KB; a
quadratic one takes 16x. The reference is the finder before the patterns were made linear: its e-mail
pattern took 1.1 s on a 16 KB run of letters and 22 s on 64 KB, so 1 MB would take roughly 90 minutes.
The last lines print the worst case against `--budget` seconds per MB (a report, never an assertion).
"""
import argparse
import time

from reward_auditor.perturbations import protected_spans

UNITS = ["a", "ACGT", "a.", "a-", "-", "+", "1", "1.", "a_", "aB", "a1", "@", "a@", "x@y.", "#", "{", "<a",
         "`", "``", "$", "$$", "\\[", "\\(", "\\begin{x}", "\\begin{a}\\begin{b}", "\\boxed{", "http://"]
OLD_EMAIL_S = {"16 KB letters": 1.1, "64 KB letters": 22.0}  # measured with the previous finder


def timed(text: str) -> float:
    t = time.perf_counter()
    protected_spans(text)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=1.0, help="token size in MB (default 1)")
    ap.add_argument("--budget", type=float, default=5.0, help="seconds per MB reported as the budget (default 5)")
    a = ap.parse_args()
    n = int(a.mb * (1 << 20))
    worst = ("", 0.0)
    print(f"{'unit':24} {'1/4 size s':>10} {'full s':>8} {'growth':>7}")
    for u in UNITS:
        small = timed(u * (n // 4 // len(u)))
        full = timed(u * (n // len(u)))
        print(f"{u!r:24} {small:10.3f} {full:8.3f} {full / max(small, 1e-9):7.1f}")
        if full > worst[1]:
            worst = (u, full)
    per_mb = worst[1] / a.mb
    print(f"worst: {worst[0]!r} {worst[1]:.2f} s for {a.mb:g} MB = {per_mb:.2f} s/MB; "
          f"budget {a.budget:g} s/MB -> ratio {per_mb / a.budget:.2f} ({'within' if per_mb <= a.budget else 'OVER'})")
    print(f"previous finder on a run of letters: {OLD_EMAIL_S} (quadratic); "
          f"now {timed('a' * (64 << 10)):.3f} s on 64 KB")


if __name__ == "__main__":
    main()
