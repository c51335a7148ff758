"""Time and peak memory of all augmented SVDs of each offline model, factored vs dense.

    python benchmarks/augmented_svd.py [--models smollm2-135m gemma-3-270m]

Each (model, method) runs in its own process so that its peak RSS is its own. "factored" is what the
package does for QK/OV (QR of the factors + SVD of the small core); "dense" forms each head's
(d+1)×(d+1) / (d+1)×d matrix and calls torch.linalg.svd on it. MLP matrices are full rank and dense in
both (timed separately). Weight reading is not timed.
"""
import argparse
import json
import resource
import subprocess
import sys
import time

WORKER = r"""
import json, resource, sys, time, torch
from helpers.core.models import load_model
from helpers.singular.directions.augmented import (mlp_in_matrices, mlp_out_matrix, ov_factors, ov_matrix, qk_factors, qk_matrix,
                               svd_dense, svd_of_product)
from helpers.core.weights import layer_weights
name, method = sys.argv[1], sys.argv[2]
torch.set_num_threads(2)
model = load_model(name)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
attention = mlp = 0.0
for layer in range(model.n_layers):
    w = layer_weights(model, layer)
    start = time.perf_counter()
    if method == "factored":
        svd_of_product(*qk_factors(w)); svd_of_product(*ov_factors(w))
    else:
        svd_dense(qk_matrix(w)); svd_dense(ov_matrix(w))
    attention += time.perf_counter() - start
    start = time.perf_counter()
    for m in mlp_in_matrices(w).values(): svd_dense(m)
    svd_dense(mlp_out_matrix(w))
    mlp += time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(dict(model=name, method=method, attention=round(attention, 2), mlp=round(mlp, 2),
                      peak_rss_gb=round(peak / 2**20, 2), rss_growth_gb=round((peak - base) / 2**20, 2))))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma-3-270m"])
    args = parser.parse_args()
    print(f"{'model':15} {'QK/OV SVDs':10} {'QK+OV s':>8} {'MLP s':>6} {'peak RSS GB':>12} {'growth GB':>10}")
    for name in args.models:
        for method in ("factored", "dense"):
            out = subprocess.run([sys.executable, "-c", WORKER, name, method], capture_output=True, text=True,
                                 check=True).stdout.strip().splitlines()[-1]
            r = json.loads(out)
            print(f"{r['model']:15} {r['method']:10} {r['attention']:8.1f} {r['mlp']:6.1f} {r['peak_rss_gb']:12.2f} "
                  f"{r['rss_growth_gb']:10.2f}", flush=True)


if __name__ == "__main__":
    main()
