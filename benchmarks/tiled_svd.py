"""Cost of paper 2's full sweep (all sites × layers × checks A, B, C), and its memory at Gemma-2-2B's shapes.

    python benchmarks/tiled_svd.py [--tokens 16384] [--layers all]     # gemma-3-270m, real weights
    python benchmarks/tiled_svd.py --gemma-2-2b-shapes                  # random init, Gemma-2-2B's shapes

Prints the wall time of the sweep, of one plain forward pass over the same sequences (same batching), their
ratio, and the process' peak resident memory. Before running anything it prints the multiply-adds that the
sweep's forwards must do (the corpus pass's, and check C's steered forwards, ours and the released rules'),
counted from the same batching rules as the sweep, over those of the plain pass: a floor under the ratio
that no speed-up of the code lowers, only fewer or shorter forwards (``--work-only`` stops there). With ``--gemma-2-2b-shapes`` the model is Gemma-2-2B's
published architecture (26 layers, d 2304, MLP 9216, 8 query / 4 KV heads of 256, vocab 256000) with random
weights, run on a short corpus (its statistics' memory does not grow with the number of tokens; the
model's does not either), to check that the sweep fits in 24 GiB: checks A and B on every site of all 26
layers, check C on the deepest chosen layer's two residual sites only (two short texts; its memory does not depend
on the number of layers, and each steered forward of a 2.6B model costs a minute on 2 cores).
"""
import argparse
import inspect
import resource
import tempfile
import time
from pathlib import Path

import torch

from helpers.tiled.plans import build_plans
from helpers.tiled.judges import RELEASED_MOUNTS, RELEASED_TEXTS
from helpers.tiled.steer import Steering, check_c, steer_batches, steer_texts
from helpers.tiled.sweep import sweep
from helpers.tiled.thresholds import load_thresholds
from helpers.tiled.verdicts import check_a, check_b
from helpers.tiled.statistics import SiteStatistics, pass_tokens
from helpers.tiled.sites import all_sites
from helpers.tiled.corpus import corpus_paragraphs, sample_tokens
from helpers.core.models import MODELS, load_model, model_from_config
from helpers.pipeline.yardstick import PLAIN_PASS, plain_pass_seconds

GEMMA_2_2B = MODELS["gemma-2-2b"].published_config


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def forward_macs(model, rows: int, width: int, blocks: int, logit_rows: int = 0) -> float:
    """Multiply-adds of one forward of ``rows`` sequences padded to ``width`` tokens through ``blocks`` blocks
    and the LM head at ``logit_rows`` positions: each block's weights (block 0's: the models here have blocks
    alike) once per padded token, attention's scores and mixing once per pair of padded positions
    (2 · width² · n_heads · d_head per sequence), the head vocab · d_model per row. Norms, activations and the
    embedding are left out (a few per cent)."""
    block = sum(p.numel() for p in model.block(0).parameters() if p.dim() == 2)
    attention = 2 * rows * width ** 2 * model.n_heads * model.d_head
    vocab, d_model = model.hf_model.lm_head.weight.shape
    return blocks * (rows * width * block + attention) + logit_rows * vocab * d_model


def sweep_work(model, sample, thresholds: dict, layers, batch: int, n_texts: int) -> dict:
    """Multiply-adds (``forward_macs``) of the plain pass, which are also the corpus pass's (the same
    sequences, ``pass_tokens``), and of check C's forwards as ``helpers.tiled.sweep.sweep`` runs them: the
    unsteered one, and per residual site at layer l the steered forwards through the blocks from l on, of its
    three directions and the dose's other α over every text, and of the released rules' mounts (its top ones
    by lift, as many as the site's tiles have, at most ``RELEASED_MOUNTS``) over the first texts
    (``steer_batches``, with ``Steering``'s budget of padded tokens). Builds the residual sites' plans for
    their mount counts."""
    plain = sum(forward_macs(model, *tokens.shape, model.n_layers)
                for positions in sample.halves().values() for _, tokens in pass_tokens(sample, positions, batch))
    texts = steer_texts(sample, n_texts)
    last, t = texts.last, thresholds["C"]
    budget = inspect.signature(Steering).parameters["max_tokens"].default
    m = 3 + len([a for a in dict.fromkeys(t["dose_alphas"]) if a != t["alpha"]])
    few = last[:min(RELEASED_TEXTS, len(last))]
    residual = build_plans(model, [s for s in all_sites(model, layers) if s.residual], thresholds, effective=False)
    steered = dict(ours=forward_macs(model, *texts.tokens.shape, model.n_layers, len(last)), released=0.0)
    for plan in residual:
        mounts = min(RELEASED_MOUNTS, plan.sets["tile"].U.shape[1])
        for label, ends, directions in (("ours", last, m), ("released", few, mounts)):
            for rows in steer_batches(ends, directions, budget):
                width = max(int(ends[i]) for _, i in rows) + 1
                steered[label] += forward_macs(model, len(rows), width, model.n_layers - plan.site.layer, len(rows))
    return dict(plain=plain, steered=sum(steered.values()), released=steered["released"], residual_sites=len(residual))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=PLAIN_PASS["n_tokens"])
    parser.add_argument("--max-tokens", type=int, default=PLAIN_PASS["max_tokens"])
    parser.add_argument("--layers", default="all", help="'all' or comma-separated layer indices")
    parser.add_argument("--gemma-2-2b-shapes", action="store_true")
    parser.add_argument("--batch", type=int, default=PLAIN_PASS["batch"])
    parser.add_argument("--work-only", action="store_true", help="print the multiply-adds' floor and stop")
    args = parser.parse_args()
    torch.set_num_threads(2)
    thresholds = load_thresholds()
    if args.gemma_2_2b_shapes:
        model = model_from_config("gemma-2-2b-shapes", GEMMA_2_2B)
        folder = Path(tempfile.mkdtemp())
        (folder / "short.txt").write_text("\n\n".join(corpus_paragraphs("python-docs")[:12]))
        sample = sample_tokens(model.tokenizer, str(folder / "short.txt"), n_tokens=min(args.tokens, 256),
                               max_tokens=64, tokenizer_name="gpt2")
        thresholds["C"]["bootstrap"], thresholds["C"]["dose_alphas"] = 5, [2.0]
        n_texts = 4
    else:
        model = load_model("gemma-3-270m", processing="raw")
        sample = sample_tokens(model.tokenizer, "python-docs", n_tokens=args.tokens, max_tokens=args.max_tokens,
                               tokenizer_name="gemma-3-270m")
        n_texts = 16
    layers = None if args.layers == "all" else [int(x) for x in args.layers.split(",")]
    print(f"model {model.name}: {sum(p.numel() for p in model.hf_model.parameters()) / 1e6:.0f} M parameters; "
          f"corpus {sample.record()}; peak so far {peak_gib():.2f} GiB")
    if not args.gemma_2_2b_shapes:
        work = sweep_work(model, sample, thresholds, layers, args.batch, n_texts)
        floor = (work["plain"] + work["steered"]) / work["plain"]
        print(f"multiply-adds: plain pass {work['plain'] / 1e12:.2f} T; the sweep's forwards {floor:.2f}x that "
              f"(the corpus pass 1x, check C's forwards over {work['residual_sites']} residual sites "
              f"{work['steered'] / work['plain']:.2f}x, of which the released rules' own steers "
              f"{work['released'] / work['plain']:.2f}x): a floor under the sweep's ratio")
        if args.work_only:
            return
    plain = plain_pass_seconds(model, sample, args.batch)
    print(f"plain forward pass over the same sequences: {plain:.1f} s")
    start = time.perf_counter()
    if args.gemma_2_2b_shapes:
        plans = build_plans(model, all_sites(model, layers), thresholds)
        print(f"plans (tile SVDs and baselines of {len(plans)} streams): {time.perf_counter() - start:.1f} s; "
              f"peak {peak_gib():.2f} GiB")
        stats = SiteStatistics(model, plans)
        stats.run(sample, batch=args.batch)
        a, b = check_a(stats, thresholds), check_b(stats, thresholds, model)
        print(f"corpus pass and checks A, B: {time.perf_counter() - start:.1f} s; peak {peak_gib():.2f} GiB")
        deepest = max(p.site.layer for p in plans)
        last = [p for p in plans if p.site.layer == deepest]
        c, _ = check_c(model, last, steer_texts(sample, n_texts=2, max_len=16), thresholds)
        print(f"A: {len(a)} streams, B: {len(b)}, C: {len(c)} steered sites (layer {deepest})")
    else:
        result = sweep(model, sample, thresholds, layers=layers, n_texts=n_texts, batch=args.batch, progress=True)
        print("pass counts:", result.pass_counts())
    seconds = time.perf_counter() - start
    print(f"sweep: {seconds:.1f} s = {seconds / plain:.1f}x the plain pass")
    print(f"peak resident memory: {peak_gib():.2f} GiB")


if __name__ == "__main__":
    main()
