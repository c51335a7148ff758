"""Score a direction-circuit file on fresh held-out prompts of its task (docs/methods.md §1.7).

    python -m helpers.evaluate CIRCUIT.safetensors [--prompts 96] [--seed S] [--control-seeds 3]
                                                   [--ranking signed] [--weights-dir DIR] [--json OUT]
                                                   [--device auto] [--adversarial]

What it scores and prints is ``helpers.singular.masking.circuit_evaluation``'s.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from helpers.core.cache import atomic_write_json
from helpers.core.device import DeviceUnavailableError
from helpers.core.folder_checks import ModelFolderError
from helpers.core.models import ModelUnavailableError
from helpers.pipeline.summaries import summary_value
from helpers.singular.masking.circuit_evaluation import evaluate_file, report
from helpers.singular.masking.scoring import RANKINGS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("circuit", help="a circuit file (.safetensors) written by notebook 02 or save_circuit")
    parser.add_argument("--prompts", type=int, default=96, help="fresh prompts to draw (default 96)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the fresh prompts (default: training seed + 1)")
    parser.add_argument("--control-seeds", type=int, default=3, help="random controls (default 3)")
    parser.add_argument("--ranking", choices=RANKINGS, default="signed", help="how scores rank directions")
    parser.add_argument("--weights-dir", default=None, help="local Hugging Face folder for a hub model")
    parser.add_argument("--device", default="auto", help="auto (default: cuda where a GPU is present, else cpu), cpu "
                                                         "or cuda (refused without a GPU)")
    parser.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    parser.add_argument("--adversarial", action="store_true",
                        help="also attack the circuit: partial and adversarial settings of the directions it leaves "
                             "out, by the rules of data/circuit_attack.toml (minutes on a CPU)")
    args = parser.parse_args(argv)
    try:
        result = evaluate_file(args.circuit, args.prompts, args.seed, args.control_seeds, args.ranking,
                               weights_dir=args.weights_dir, device=args.device, adversarial=args.adversarial)
    except (FileNotFoundError, ValueError, ModelUnavailableError, ModelFolderError, DeviceUnavailableError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report(result))
    if args.json:
        atomic_write_json(Path(args.json), {k: summary_value(v) for k, v in result.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
