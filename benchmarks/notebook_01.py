"""Where notebook 01's time goes: each stage of it, timed on its own, per model.

    python benchmarks/notebook_01.py [--models smollm2-135m gemma-3-270m] [--threads 2]

Stages, as the notebook runs them: loading the model; the identity checks of every layer against the
hook values of one prompt; the augmented SVDs of every layer; the quantization noise floor of every
layer; the token read-outs of the last two layers. Each model runs in its own process. Run it alone: a
second job on the same cores slows every stage.
"""
import argparse
import json
import subprocess
import sys

WORKER = r"""
import json, sys, time, torch
name, threads = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(threads)
from helpers.core.models import load_model
from helpers.singular.directions.augmented import augmented_svds, spectra_frame
from helpers.singular.directions.identities import identity_errors
from helpers.singular.directions.quantization import noise_floor_frame
from helpers.singular.directions.readout import readout_table
times = {}
start = time.perf_counter()
model = load_model(name)
times["load"] = time.perf_counter() - start
start = time.perf_counter()
with torch.no_grad():
    _, cache = model.bridge.run_with_cache(model.to_tokens("When Mary and John went to the store, John gave a drink to"))
worst = max(max(identity_errors(model, cache, layer).values()) for layer in range(model.n_layers))
times["identities"] = time.perf_counter() - start
start = time.perf_counter()
svds = augmented_svds(model, vectors=[model.n_layers - 2, model.n_layers - 1])  # as the notebook keeps them
spectra_frame(svds)
times["svds"] = time.perf_counter() - start
start = time.perf_counter()
noise_floor_frame(model, range(model.n_layers))
times["noise_floor"] = time.perf_counter() - start
start = time.perf_counter()
readout_table(model, svds, [model.n_layers - 2, model.n_layers - 1])
times["readouts"] = time.perf_counter() - start
print(json.dumps(dict(model=name, worst_identity_error=worst, **{k: round(v, 1) for k, v in times.items()})))
"""
STAGES = ("load", "identities", "svds", "noise_floor", "readouts")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma-3-270m"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"{'model':15}" + "".join(f"{s + ' s':>14}" for s in STAGES) + f"{'total s':>10}{'worst identity':>16}")
    for name in args.models:
        out = subprocess.run([sys.executable, "-c", WORKER, name, str(args.threads)], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        print(f"{r['model']:15}" + "".join(f"{r[s]:14.1f}" for s in STAGES) + f"{sum(r[s] for s in STAGES):10.1f}"
              f"{r['worst_identity_error']:16.2e}", flush=True)


if __name__ == "__main__":
    main()
