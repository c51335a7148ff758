"""Paper 2's planted mount (helpers.tiled.planted): the surgery against its formula, the direction it reads
against activations gathered independently, and the checks on a plant that dominates its site."""
import pytest
import torch

from helpers.core.models import load_model
from helpers.tiled.corpus import sample_tokens
from helpers.tiled.planted import (plant_mount, planted_row, tile_columns, tile_input_direction,
                                   token_direction)
from helpers.tiled.sites import Site, site_matrix
from helpers.tiled.thresholds import load_thresholds
from helpers.tiled.tiling import tile_svd

MODEL = "tiny-gemma3"


def fresh():
    return load_model(MODEL, processing="raw")  # the plant changes weights in place: never the shared copy


def small_sample(model):
    return sample_tokens(model.tokenizer, "python-docs", n_tokens=96, max_tokens=24, seed=0, tokenizer_name=MODEL)


def test_the_plant_adds_s_u_vT_on_the_tile_columns_only():
    model = fresh()
    site = Site(1, "mlp.down")
    before = site_matrix(model, site).double()
    d_out, d_in = before.shape
    columns = tile_columns(d_in, d_in // 2, 1)
    v = torch.zeros(d_in, dtype=torch.float64)
    v[columns.start: columns.stop] = torch.randn(len(columns), generator=torch.Generator().manual_seed(0))
    v /= v.norm()
    u = torch.randn(d_out, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    u /= u.norm()
    record = plant_mount(model, site, v, u, strength=2.0)
    sigma = float(torch.linalg.svdvals(before)[0])
    assert record["sigma_1"] == pytest.approx(sigma, rel=1e-6) and record["scale"] == pytest.approx(2 * sigma, rel=1e-6)
    delta = site_matrix(model, site).double() - before
    assert torch.allclose(delta, record["scale"] * torch.outer(u, v), atol=1e-5 * record["scale"])
    assert delta[:, : columns.start].abs().max() == 0 and record["columns"] == [columns.start, columns.stop]
    assert torch.equal(site_matrix(model, Site(0, "mlp.down")), site_matrix(fresh(), Site(0, "mlp.down")))
    top = tile_svd(site_matrix(model, site), d_in // 2, 1).per_tile(1).U[:, 1].double()  # tile 1's first mount
    assert abs(float(top @ u)) > 0.95  # the planted write leads the tile's strongest mount (its own modes mix in)
    with pytest.raises(ValueError, match="positive multiple"):
        plant_mount(model, site, v, u, strength=0.0)


def test_the_direction_read_is_the_top_second_moment_of_the_tiles_inputs_on_the_fit_half():
    """Oracle: the site's inputs captured by run_with_cache, one fit sequence at a time, at its sampled positions."""
    model = fresh()
    sample = small_sample(model)
    site = Site(0, "mlp.down")
    d_in = site_matrix(model, site).shape[1]
    columns = tile_columns(d_in, d_in // 2, 0)
    v = tile_input_direction(model, sample, site, columns, batch=3)
    rows = []
    for sequence, positions in sample.halves()["fit"].items():
        tokens = sample.sequences[sequence][: max(positions) + 1][None]
        with torch.no_grad():
            _, cache = model.bridge.run_with_cache(tokens)
        rows.append(cache[site.input_hook][0, positions, columns.start: columns.stop].double())
    x = torch.cat(rows)
    top = torch.linalg.eigh(x.T @ x).eigenvectors[:, -1]
    assert abs(float(v[columns.start: columns.stop] @ top)) > 1 - 1e-6 and float(v.norm()) == pytest.approx(1.0)
    assert v[columns.stop:].abs().max() == 0 and v[v.abs().argmax()] > 0


def test_a_token_direction_is_the_gain_folded_unembedding_column_of_one_token():
    model = fresh()
    u = token_direction(model, " the")
    assert float(u.norm()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="single token"):
        token_direction(model, " antidisestablishmentarianism and more")


def test_the_tiles_of_a_site_are_refused_past_the_last():
    assert tile_columns(1152, 512, 2) == range(1024, 1152) and tile_columns(1152, 512, 0) == range(0, 512)
    for bad in (3, -1, True):
        with pytest.raises(ValueError, match="tiles 0 to 2"):
            tile_columns(1152, 512, bad)


def test_a_dominant_plant_lifts_the_tile_mounts_and_covers_the_site():
    model = fresh()
    plant = dict(site="mlp.down", layer=model.n_layers - 1, tile=0, token=" the", strength=8.0)
    row = planted_row(model, small_sample(model), load_thresholds(), plant, n_texts=2, batch=8, log=lambda _: None)
    assert row["planted"]["lift_tile"] > row["unplanted"]["lift_tile"]
    assert row["planted"]["coverage_peak"] > row["unplanted"]["coverage_peak"]
    assert row["planted"]["A1"] and row["plant"]["token"] == " the" and row["plant"]["scale"] > 0
    assert set(row["unplanted"]) == set(row["planted"]) >= {"A1", "A2", "A4", "B1", "C1", "lift_tile"}
