"""The points the paper-2 figure titles state, computed from their tables: checked by hand."""
import pandas as pd

from helpers.figures.tiled import lift_finding, steer_finding


def test_the_lift_finding_averages_the_tile_partition_gap_and_counts_controls_reaching_the_model():
    a = pd.DataFrame(dict(site=["q", "q", "o"], layer=[0, 1, 0], lift_tile=[0.10, 0.20, 0.30],
                          lift_random_partition=[0.11, 0.18, None]))
    control = pd.DataFrame(dict(site=["q", "q", "o"], layer=[0, 1, 0], lift_tile=[0.10, 0.19, 0.31]))
    text = lift_finding(a, {"random-init": control, "permuted": control.assign(lift_tile=[0.0, 0.0, 0.30])})
    assert "mean |difference| 0.0150" in text  # (0.01 + 0.02) / 2; the row without a partition is left out
    assert text.endswith("; random-init weights reach the model's tile lift at 2 of 3 site-layers, "
                         "permuted weights at 1 of 3")  # equal counts


def test_the_steer_finding_counts_random_wins_and_judged_layers_where_every_line_clears_the_threshold():
    c = pd.DataFrame(dict(layer=[5, 6, 7, 8], rho_tile=[0.1, 0.2, 0.3, 0.04], rho_whole=[0.2, 0.05, 0.3, 0.5],
                          rho_random=[0.3, 0.2, 0.4, 0.6]))
    text = steer_finding(c, 6, 0.05)
    assert "higher ρ than the strongest tile mount at 3 of 4 site-layers" in text  # 0.2 = 0.2 is not higher
    assert "every direction clears ρ = 0.05 at 2 of 3" in text  # layer 6 has 0.05 exactly: clears; layer 8 does not


def test_the_lift_finding_counts_site_layers_not_the_effective_path_streams():
    a = pd.DataFrame(dict(site=["q", "up", "up"], layer=[0, 0, 0], lift_tile=[0.1, 0.2, 0.9],
                          lift_random_partition=[0.1, 0.2, None], effective=[False, False, True]))
    control = a.assign(lift_tile=[0.2, 0.0, 1.0])
    assert lift_finding(a, {"random-init": control}).endswith("reach the model's tile lift at 1 of 2 site-layers")
