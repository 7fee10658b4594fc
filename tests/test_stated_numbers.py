"The report states what its numbers show: one accuracy, chance on decided pairs, the bar at each rank, truncation."
import numpy as np
import pandas as pd
import pytest


# ---- the detectability warning quotes the procedure's bar at the test's rank ---------------------------------------

def test_detectability_warning_quotes_the_bh_bar_at_the_rank_not_alpha_over_two():
    from reward_auditor.audit import AuditSettings, detectability_warnings
    fam = pd.DataFrame({"model": "rm", "subset": "chat", "perturbation": ["A", "B", "C", "D"], "group": "response",
                        "p_min": [0.001, 0.02, 0.5, 0.5], "n_nonzero": [10, 6, 1, 1],
                        "detectable": [True, False, False, False]})
    (w,) = detectability_warnings(fam, AuditSettings())        # two-sided BH, alpha 0.05: 0.025 per tail
    # B's smallest p 0.02 ranks 2nd of 4: BH needs p <= 0.025 * 2/4 = 0.0125 there, not 0.025
    assert "B (N0 = 6, p >= 0.02, flagged only at p <= 0.0125)" in w
    # C (p_min 0.5) would fail at rank 4 too (B's 0.02 > 0.025 · 3/4 then): it must get ahead of B, to 0.0125
    assert "C (N0 = 1, p >= 0.5, flagged only at p <= 0.0125)" in w
    assert "needed at best" not in w
    (w1,) = detectability_warnings(fam, AuditSettings(two_sided=False))   # one-sided: alpha 0.05 · 2/4
    assert "B (N0 = 6, p >= 0.02, flagged only at p <= 0.025)" in w1
