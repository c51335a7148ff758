"""Paper 2's readable grids: the number and its mark in each cell, at the rounding boundary and for checks
not judged."""
import pandas as pd

from helpers.tiled.grids import marked_grid, rates_grid


def test_a_marked_grid_puts_each_site_layer_value_with_its_mark_in_site_order():
    frame = pd.DataFrame(dict(site=["mlp.up", "mlp.up", "attn.q", "attn.q"], layer=[0, 1, 0, 1],
                              lift=[0.12345, -0.0004, 0.5, 0.0], A1=[True, False, None, float("nan")]))
    grid = marked_grid(frame, "lift", "A1")
    assert list(grid.index) == ["mlp.up", "attn.q"] and list(grid.columns) == [0, 1]
    assert grid.loc["mlp.up", 0] == "0.123 ✓"
    assert grid.loc["mlp.up", 1] == "0.000 ✗"  # -0.0004 rounds to -0.0: shown without the sign
    assert grid.loc["attn.q", 0] == "0.500 ·" and grid.loc["attn.q", 1] == "0.000 ·"


def test_a_rates_grid_shows_the_controls_and_flags_uninformative_checks():
    index = pd.MultiIndex.from_tuples([("attn.q", "A1"), ("attn.q", "B1"), ("mlp.down", "A1")], names=["site", "check"])
    rates = pd.DataFrame({"model": [1.0, 0.444, 1.0], "random-init": [1.0, 0.056, 0.889],
                          "permuted": [1.0, 0.056, 0.833], "uninformative": [True, False, False]}, index=index)
    grid = rates_grid(rates)
    assert grid.loc["attn.q", "A1"] == "100% (100%, 100%) ⚠"
    assert grid.loc["attn.q", "B1"] == "44% (6%, 6%)"
    assert grid.loc["mlp.down", "B1"] == ""  # not measured there


def test_tables_print_floats_without_negative_zero_or_trailing_zeros():
    from helpers.figures.style import table_number

    assert table_number(-0.0) == "0" and table_number(0.0) == "0"
    assert table_number(-1e-05) == "-1e-05"
    assert table_number(1718.0) == "1718" and table_number(9999.4) == "9999"
    assert table_number(10000.0) == "10,000" and table_number(86730.0) == "86,730"
    assert table_number(0.078849) == "0.07885" and table_number(0.000195) == "0.000195"
