"""Recall and precision per port fault kind, seen through every fabricsim port view.

python bench/port_views_eval.py [Field_BER_Thresholds.csv]
"""

from __future__ import annotations

import sys
import time

from detectors.ber_thresholds import ThresholdTable
from fabricsim.faults import FAULT_KINDS
from fabricsim.port_views import PORT_FAULTS, PORT_VIEWS, run_view


def main() -> None:
    table = ThresholdTable.load(sys.argv[1]) if len(sys.argv) > 1 else None
    kinds = [k for k in FAULT_KINDS if f"{k}@" in PORT_FAULTS]
    print(f"{'view':18s} {'fault':18s} recall precision  (thresholds: {'table' if table else 'generic'})")
    for view in PORT_VIEWS:
        t = time.perf_counter()
        rep = run_view(view, table)
        for k in kinds:
            s = rep.by_fault[k]
            c = [sum(rep.by_kind.get(x, [0, 0, 0])[i] for x in FAULT_KINDS[k]) for i in range(3)]
            prec = c[0] / sum(c) if sum(c) else float("nan")
            print(f"{view:18s} {k:18s} {s.detected}/{s.total}    {prec:.2f}")
        print(f"{view:18s} overall precision {rep.precision} recall {rep.recall} false {rep.false_findings}"
              f" benign {rep.benign_alarms} ({time.perf_counter() - t:.0f} s)")  # fmt: skip
        for ex in rep.false_examples[:4]:
            print("   false:", ex)


if __name__ == "__main__":
    main()
