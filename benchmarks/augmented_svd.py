"""Time and peak memory of all augmented SVDs of each offline model, factored vs dense.

    python benchmarks/augmented_svd.py [--models smollm2-135m gemma-3-270m]

Each (model, method) runs in its own process so that its peak RSS is its own. "factored" is what the
package does (QR of the factors + SVD of the small core for QK/OV); "dense" forms each head's
(d+1)×(d+1) / (d+1)×d matrix and calls torch.linalg.svd on it. MLP matrices are dense in both.
"""
import argparse
import json
import resource
import subprocess
import sys
import time

WORKER = r"""
import json, resource, sys, time, torch
from helpers.models import load_model
from helpers.augmented import layer_svds, mlp_in_matrices, mlp_out_matrix, ov_matrix, qk_matrix, svd_dense
from helpers.weights import layer_weights
name, method = sys.argv[1], sys.argv[2]
torch.set_num_threads(2)
model = load_model(name)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
for layer in range(model.n_layers):
    w = layer_weights(model, layer)
    if method == "factored":
        layer_svds(w)
    else:
        svd_dense(qk_matrix(w)); svd_dense(ov_matrix(w))
        for m in mlp_in_matrices(w).values(): svd_dense(m)
        svd_dense(mlp_out_matrix(w))
seconds = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(dict(model=name, method=method, seconds=round(seconds, 2), peak_rss_gb=round(peak / 2**20, 2),
                      rss_growth_gb=round((peak - base) / 2**20, 2))))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma-3-270m"])
    args = parser.parse_args()
    print(f"{'model':15} {'method':9} {'seconds':>8} {'peak RSS GB':>12} {'growth GB':>10}")
    for name in args.models:
        for method in ("factored", "dense"):
            out = subprocess.run([sys.executable, "-c", WORKER, name, method], capture_output=True, text=True,
                                 check=True).stdout.strip().splitlines()[-1]
            r = json.loads(out)
            print(f"{r['model']:15} {r['method']:9} {r['seconds']:8.1f} {r['peak_rss_gb']:12.2f} {r['rss_growth_gb']:10.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
