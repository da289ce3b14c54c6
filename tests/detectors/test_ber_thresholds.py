"""NVIDIA's field BER thresholds CSV: exact levels from the real file, fallbacks, and load errors."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from graywire.detectors.ber_thresholds import (
    GENERIC,
    LANE_CLASSES,
    Levels,
    ThresholdTable,
    lane_class,
    lane_class_codes,
)

G = 1e9
CSV_NAME = "pdr_Field_BER_Thresholds.csv"
HEADER = (
    "ASIC,Protocol,Speed,FEC TYPE,FEC OPCODE,Media Type,"
    "Pre-FEC BER Error,Pre-FEC BER Warning,Pre-FEC BER Normal,"
    "Post-FEC BER Error,Post-FEC BER Warning,Post-FEC BER Normal,"
    "Symbol BER Error,Symbol BER Warning,Symbol BER Normal,Version"
)
# The levels NVIDIA gives 7nm NDR links with FEC 14 (and 12) on DAC and ACC cables.
NDR_PRE = Levels(error=1e-6, warning=5e-7, normal=1e-7)
NDR_POST = Levels(error=1e-11, warning=5e-12, normal=1e-12)
NDR_SYMBOL = Levels(error=1e-14, warning=5e-15, normal=1e-15)


@pytest.fixture(scope="module")
def csv_path(real_fixtures: Path) -> Path:
    return real_fixtures / "ufm" / CSV_NAME


@pytest.fixture(scope="module")
def table(csv_path: Path) -> ThresholdTable:
    return ThresholdTable.load(csv_path)


def write(tmp_path: Path, *lines: str, name: str = "thresholds.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


# -- the real file --------------------------------------------------------------------------------------
def test_ndr_fec14_acc_exact_levels(table: ThresholdTable) -> None:
    t = table.lookup("NDR", 14, "ACC")
    assert (t.pre_fec, t.post_fec, t.symbol) == (NDR_PRE, NDR_POST, NDR_SYMBOL)
    # Row numbers are file lines (the header is line 1): NDR FEC 14 ACC is the third line.
    assert t.source == f"{CSV_NAME} row 3: 7nm IB NDR FEC 14 ACC"
    assert not t.generic


@pytest.mark.parametrize(
    ("speed", "fec", "media", "row", "pre"),
    [
        ("NDR", 14, "DAC", "row 2: 7nm IB NDR FEC 14 DACs", NDR_PRE),
        ("NDR", 14, "DACs", "row 2: 7nm IB NDR FEC 14 DACs", NDR_PRE),
        ("NDR", 14, "Active", "row 4: 7nm IB NDR FEC 14 Active", Levels(1e-5, 5e-6, 1e-6)),
        ("NDR", 14, "Active_DiD", "row 5: 7nm IB NDR FEC 14 Active_DiD", Levels(1e-5, 5e-6, 1e-6)),
        ("NDR", 12, "ACC", "row 7: 7nm IB NDR FEC 12 ACCs", NDR_PRE),  # the file spells it "ACCs"
        ("NDR", 12, "ACCs", "row 7: 7nm IB NDR FEC 12 ACCs", NDR_PRE),
        ("NDR", 7, "ACCs", "row 11: 7nm IB NDR FEC 7 ACCs", Levels(1e-7, 5e-8, 1e-8)),
        ("HDR", 12, "DACs", "row 42: 16nm IB HDR FEC 12 DACs", Levels(1e-5, 5e-6, 1e-6)),
        ("ndr", 14, " acc ", "row 3: 7nm IB NDR FEC 14 ACC", NDR_PRE),  # case and blanks do not matter
    ],
)
def test_exact_rows_and_media_spellings(
    table: ThresholdTable, speed: str, fec: int, media: str, row: str, pre: Levels
) -> None:
    t = table.lookup(speed, fec, media)
    assert t.source == f"{CSV_NAME} {row}"
    assert t.pre_fec == pre


def test_ndr_fec7_post_and_symbol_levels(table: ThresholdTable) -> None:
    t = table.lookup("NDR", 7, "DAC")
    assert t.post_fec == Levels(1e-13, 5e-14, 1e-14)
    assert t.symbol == Levels(1e-13, 5e-14, 1e-14)


def test_every_unambiguous_row_matches_the_file(csv_path: Path, table: ThresholdTable) -> None:
    """Each (speed, FEC, media) that appears once in the file has that row's nine levels."""
    with csv_path.open(newline="") as fh:
        raw = list(csv.DictReader(fh))
    assert len(raw) == 68
    by_key: dict[tuple[str, int, str], list[dict[str, str]]] = {}
    for r in raw:
        media = r["Media Type"].lower().removesuffix("s")
        by_key.setdefault((r["Speed"], int(r["FEC OPCODE"]), media), []).append(r)
    unique = {k: rows[0] for k, rows in by_key.items() if len(rows) == 1}
    assert len(unique) == 16  # the 12 NDR rows and the four HDR FEC 12 rows
    for (speed, fec, media), r in unique.items():
        t = table.lookup(speed, fec, media)
        for kind, levels in (("Pre-FEC", t.pre_fec), ("Post-FEC", t.post_fec), ("Symbol", t.symbol)):
            want = [float(r[f"{kind} BER {lvl}"]) for lvl in ("Error", "Warning", "Normal")]
            assert [levels.error, levels.warning, levels.normal] == want, (speed, fec, media, kind)


def test_quoted_fec_type_with_commas_parses(table: ThresholdTable) -> None:
    # "Standard_LL_RS_FEC - RS(271,257) (3)" and "LL-FEC - (271,257) + PLR (13)" are quoted fields
    # holding commas: were they split, FEC OPCODE would read "257) (3)" and the load would fail.
    t3 = table.lookup("HDR", 3, "DACs")
    # Both ASIC generations have this key; the stricter (7nm) row is kept and says so.
    assert t3.source == f"{CSV_NAME} row 26: 7nm IB HDR FEC 3 DACs (strictest of 2 ASIC rows)"
    assert t3.post_fec == Levels(1e-13, 5e-14, 1e-14)  # the same on both ASICs
    t13 = table.lookup("HDR", 13, "Active_DiD")
    assert "HDR FEC 13 Active_DiD" in t13.source
    assert t13.post_fec == Levels(1e-13, 5e-14, 1e-14)
    # The rows after the quoted ones are intact too.
    assert table.lookup("EDR", 0, "DAC").pre_fec == Levels(1e-13, 5e-14, 1e-14)


def test_quoted_fec_type_in_a_small_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        HEADER,
        '7nm,IB,HDR,"LL-FEC - (271,257) + PLR (13)",13,ACCs,'
        "2.00E-07,6.00E-08,2.00E-08,3.00E-13,7.00E-14,3.00E-14,4.00E-14,8.00E-15,4.00E-15,V05",
    )
    t = ThresholdTable.load(path).lookup("HDR", 13, "ACC")
    assert t.pre_fec == Levels(2e-7, 6e-8, 2e-8)
    assert t.post_fec == Levels(3e-13, 7e-14, 3e-14)
    assert t.symbol == Levels(4e-14, 8e-15, 4e-15)
    assert t.source == "thresholds.csv row 2: 7nm IB HDR FEC 13 ACCs"


def test_rows_that_differ_only_by_asic_are_not_silently_overwritten(table: ThresholdTable) -> None:
    # Without knowing the ASIC, an ambiguous key should resolve like an unknown medium does: strictest.
    assert table.lookup("HDR", 13, "ACCs").pre_fec == Levels(1e-7, 5e-8, 1e-8)


# -- fallbacks --------------------------------------------------------------------------------------------
def test_xdr_uses_the_fastest_class_in_the_table(table: ThresholdTable) -> None:
    # An 800G 4x port is XDR (200G a lane); the file stops at NDR.
    t = table.lookup("XDR", 14, "ACC")
    assert t.source == f"{CSV_NAME} row 3: 7nm IB NDR FEC 14 ACC"
    assert t.pre_fec == NDR_PRE
    assert table.lookup("XDR", 12, "Active").source == f"{CSV_NAME} row 8: 7nm IB NDR FEC 12 Active"


@pytest.mark.parametrize(("speed", "media"), [("NDR", "AOC"), ("NDR", None), ("NDR", ""), ("XDR", "fiber")])
def test_unknown_media_takes_the_strictest_row_of_the_class_and_fec(
    table: ThresholdTable, speed: str, media: str | None
) -> None:
    # NDR FEC 14: DACs and ACC at 1e-6, Active and Active_DiD at 1e-5: the first 1e-6 row wins.
    t = table.lookup(speed, 14, media)
    assert t.source == f"{CSV_NAME} row 2: 7nm IB NDR FEC 14 DACs"
    assert t.pre_fec == NDR_PRE


@pytest.mark.parametrize(
    ("speed", "fec", "media"),
    [
        (None, None, None),
        (None, 14, "ACC"),  # unknown speed class
        ("NDR", None, "ACC"),  # unknown FEC mode
        ("NDR", 99, "ACC"),  # a FEC mode the table has no row for
        ("XDR", 99, "ACC"),
        ("HDR", 14, "ACC"),  # FEC 14 exists, but not for HDR
        ("FDR", 0, "DAC"),  # slower than anything in the table
        ("SDR", 0, "DAC"),
    ],
)
def test_unknown_everything_is_the_generic_rule(
    table: ThresholdTable, speed: str | None, fec: int | None, media: str | None
) -> None:
    t = table.lookup(speed, fec, media)
    assert t is GENERIC
    assert t.generic
    assert t.source == "generic PAM4 rule (no thresholds table configured)"
    assert t.pre_fec == Levels(error=2.4e-4, warning=1e-4, normal=1e-5)
    assert t.post_fec == Levels(error=1e-12, warning=1e-13, normal=1e-15)
    assert t.symbol == Levels(error=1e-12, warning=1e-13, normal=1e-15)


def test_fastest_class_follows_the_table(tmp_path: Path) -> None:
    """A table that stops at HDR serves NDR and XDR ports from its HDR rows."""
    path = write(
        tmp_path,
        HEADER,
        "16nm,IB,HDR,KP4 (12),12,ACCs,1.00E-05,5.00E-06,1.00E-06,1.00E-13,5.00E-14,1.00E-14,"
        "1.00E-13,5.00E-14,1.00E-14,V05",
    )
    t = ThresholdTable.load(path)
    assert t.lookup("NDR", 12, "ACC").source == "thresholds.csv row 2: 16nm IB HDR FEC 12 ACCs"
    assert t.lookup("XDR", 12, "ACC").pre_fec == Levels(1e-5, 5e-6, 1e-6)
    assert t.lookup("EDR", 12, "ACC") is GENERIC


# -- load errors ------------------------------------------------------------------------------------------
def test_missing_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(
        ValueError, match=r"cannot read BER thresholds .*nope\.csv: No such file or directory"
    ):
        ThresholdTable.load(missing)


def test_a_directory_is_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read BER thresholds .*: Is a directory"):
        ThresholdTable.load(tmp_path)


def test_bad_number_names_file_and_row(tmp_path: Path) -> None:
    good = "7nm,IB,NDR,X (14),14,ACC,1e-6,5e-7,1e-7,1e-11,5e-12,1e-12,1e-14,5e-15,1e-15,V05"
    bad = "7nm,IB,NDR,X (14),14,DAC,n/a,5e-7,1e-7,1e-11,5e-12,1e-12,1e-14,5e-15,1e-15,V05"
    path = write(tmp_path, HEADER, good, bad, name="bad.csv")
    with pytest.raises(ValueError, match=r"bad\.csv: row 3: could not convert string to float: 'n/a'"):
        ThresholdTable.load(path)


def test_bad_fec_opcode_names_file_and_row(tmp_path: Path) -> None:
    row = "7nm,IB,NDR,X (14),fourteen,ACC,1e-6,5e-7,1e-7,1e-11,5e-12,1e-12,1e-14,5e-15,1e-15,V05"
    path = write(tmp_path, HEADER, row, name="opcode.csv")
    with pytest.raises(ValueError, match=r"opcode\.csv: row 2: invalid literal for int\(\)"):
        ThresholdTable.load(path)


def test_missing_column_names_file_row_and_column(tmp_path: Path) -> None:
    header = HEADER.replace("Media Type,", "")
    row = "7nm,IB,NDR,X (14),14,1e-6,5e-7,1e-7,1e-11,5e-12,1e-12,1e-14,5e-15,1e-15,V05"
    path = write(tmp_path, header, row, name="nomedia.csv")
    with pytest.raises(ValueError, match=r"nomedia\.csv: row 2: 'Media Type'"):
        ThresholdTable.load(path)


def test_header_only_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER, name="empty.csv")
    with pytest.raises(ValueError, match=r"empty\.csv: no threshold rows"):
        ThresholdTable.load(path)


def test_truncated_row_names_file_and_row(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER, "7nm,IB,NDR,X (14),14,ACC,1e-6", name="short.csv")
    with pytest.raises(ValueError, match=r"short\.csv: row 2"):
        ThresholdTable.load(path)


# -- speed classes ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("speed", "width", "cls"),
    [
        (800 * G, 4, "XDR"),
        (400 * G, 4, "NDR"),
        (200 * G, 4, "HDR"),
        (100 * G, 4, "EDR"),
        (56 * G, 4, "FDR"),
        (400 * G, 2, "XDR"),  # 200G a lane
        (200 * G, 2, "NDR"),
        (100 * G, 1, "NDR"),
        (360 * G, 4, "NDR"),  # 90G a lane: within 10% of NDR
        (356 * G, 4, "HDR"),  # 89G a lane
        (10 * G, 4, None),  # SDR: slower than any class
        (0, 4, None),
        (400 * G, 0, None),
        (-1, 4, None),
    ],
)
def test_lane_class(speed: float, width: int, cls: str | None) -> None:
    assert lane_class(speed, width) == cls


def test_lane_class_codes_match_lane_class() -> None:
    speed = np.array([800, 400, 200, 100, 56, 400, 360, 356, 10, 0, 400, np.nan]) * G
    width = np.array([4, 4, 4, 4, 4, 2, 4, 4, 4, 4, 0, 4])
    codes = lane_class_codes(speed, width)
    assert codes.tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 0, 0, 0, 0]
    names = [None, *(name for name, _ in LANE_CLASSES)]
    expected = [lane_class(float(s), int(w)) for s, w in zip(speed, width, strict=True)]
    assert [names[c] for c in codes] == expected
    assert codes.dtype == np.int64
