"""Property tests of the perfquery parser, seeded from the real infiniband-diags outputs:
whatever a line says, the parse raises only its documented ValueError (a field before any
header: not perfquery output) or gives blocks that build a valid batch.

ibnetdiscover's property is in test_ibnetdiscover.py.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from hypothesis import given

from graywire.collectors.base import OUT_OF_RANGE
from graywire.collectors.ib.perfquery import parse_perfquery, perfquery_batch
from tests.conftest import REAL_FIXTURES
from tests.strategies import PROPERTY, spliced

IB = REAL_FIXTURES / "infiniband"
T = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
OUTPUTS = (
    "perfquery_extended_switch_0x7cfe9003009ce5b0.out",
    "perfquery_extended_hca_0x7cfe9003003b4bde.out",
    "perfquery_rcv_error_details_0x7cfe9003009ce5b0-1.out",
)

pytestmark = pytest.mark.skipif(
    not IB.is_dir(),
    reason=f"real fixtures not found at {IB} (../shared/fixtures/real beside the repository)",
)


@pytest.mark.parametrize("name", OUTPUTS)
def test_perfquery_output_with_junk_spliced_in(name: str) -> None:
    text = (IB / name).read_text()
    assert parse_perfquery(text)  # the seed is real: unmutated, it has blocks

    @PROPERTY
    @given(spliced(text))
    def check(mutated: str) -> None:
        try:
            blocks = parse_perfquery(mutated)
        except ValueError as e:
            assert "not perfquery output" in str(e)
            return
        skipped: Counter[str] = Counter()
        batch = perfquery_batch([("h/mlx5_0", blocks)], T, skipped=skipped)
        assert batch.num_rows == 1 and set(skipped) <= {OUT_OF_RANGE}

    check()


def test_a_value_past_64_bits_nulls_its_cell_and_is_counted() -> None:
    """Was a silent clamp to 2**64 - 1 (a saturated-looking counter that no device sent)."""
    text = (
        "# Port extended counters: Lid 1 port 1 (CapMask: 0x5300)\n"
        f"SymbolErrorCounter:..............{2**64}\n"
        "PortRcvPkts:.....................7\n"
    )
    skipped: Counter[str] = Counter()
    row = perfquery_batch([("h/mlx5_0", parse_perfquery(text))], T, skipped=skipped).to_pylist()[0]
    assert row["symbol_errors"] is None and row["rx_packets"] == 7
    assert skipped == {OUT_OF_RANGE: 1}
