"""Text for paper 2's checks (docs/methods.md §2.3), and the seeded token sample every site shares.

Corpora, by name:

- ``"wikitext-2"``: WikiText-2 raw train from the Hugging Face hub (the paper's), lines shorter than 80
  characters and "= Title =" headers dropped, the first ~400k characters; needs the hub (or its cache);
- ``"python-docs"`` (offline default): the reference documentation that ships inside CPython
  (``pydoc_data.topics``: the language reference's prose), split into paragraphs, code and grammar blocks
  dropped, paragraphs shorter than 80 characters dropped. That text differs between Python releases (3.11.2
  gives 649 paragraphs, 3.11.7 740), so the paragraphs of CPython 3.11.7 are kept in
  ``data/python-docs.txt`` (blank-line separated; ``python_docs_from_interpreter`` made them) and every
  interpreter reads that file, verified against ``PYTHON_DOCS_SHA256``. Every summary records the corpus'
  sha256;
- a path to a local text file, or to a folder of ``.txt`` / ``.md`` / ``.rst`` files: blank-line
  separated paragraphs, the same length filter. A file in WikiText's layout (``wiki.train.raw`` as users
  have it: every line starts with a space, headers look like " = Title = ") is read as the paper read it:
  one paragraph per line, headers dropped, lines under 80 characters dropped.

Each paragraph is one sequence (BOS first, truncated to ``max_tokens``). ``sample_tokens`` draws the token
positions the statistics use, with a seed; the tokenised corpus and the sample are cached.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from helpers.core.cache import atomic_write_json, cache_dir, load_verified, save_verified

PYTHON_DOCS = Path(__file__).resolve().parents[2] / "data" / "python-docs.txt"
PYTHON_DOCS_SHA256 = "daf0d86e5317b1679b9ef70fef1ef6d093bd3450b0577efba5bd546ed6034c86"
"""sha256 of the paragraphs joined by blank lines: CPython 3.11.7's ``pydoc_data.topics`` under the rules below."""
MIN_CHARS = 80
MAX_CHARS = 400_000
TEXT_SUFFIXES = (".txt", ".md", ".rst")
CORPORA = ("python-docs", "wikitext-2")


WIKITEXT_HEADER = re.compile(r"=+ .*[^=\s].* =+")
"""A WikiText section header once the line is stripped: "= Title =", "= = Section = =" and so on."""
WIKITEXT_SUFFIXES = (".raw", ".tokens")


def _paragraphs(text: str, dropped: Counter) -> list[str]:
    """Blank-line separated blocks, each joined into one line; indented blocks (code, grammar) and headings
    dropped, each counted in ``dropped``."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [line for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        if any(line.startswith((" ", "\t", ">>>", "...")) for line in lines):
            dropped["indented blocks (taken as code, grammar or an interactive session)"] += 1
            continue
        if 2 <= len(lines) <= 3 and all(set(line.strip()) <= set("*=-~^#") for line in lines[1:]):
            dropped["headings"] += 1
            continue
        out.append(" ".join(line.strip() for line in lines))
    return out


def _wikitext_paragraphs(lines, dropped: Counter) -> list[str]:
    """WikiText's layout (the paper's corpus): one paragraph per line, " = Title = " headers dropped."""
    out = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if WIKITEXT_HEADER.fullmatch(line):
            dropped['" = Title = " headers'] += 1
            continue
        out.append(line)
    return out


def is_wikitext(path: Path, text: str) -> bool:
    """A local file in WikiText's layout: named like WikiText's files (.raw, .tokens), or holding a line
    " = Title = " (leading space, as in the raw files)."""
    return path.suffix in WIKITEXT_SUFFIXES or any(
        line.startswith(" =") and WIKITEXT_HEADER.fullmatch(line.strip()) for line in text.splitlines())


def _keep(paragraphs: list[str], dropped: Counter) -> list[str]:
    kept, total = [], 0
    for p in paragraphs:
        if len(p) < MIN_CHARS:
            dropped[f"paragraphs shorter than {MIN_CHARS} characters"] += 1
            continue
        if total >= MAX_CHARS:
            break
        kept.append(p)
        total += len(p)
    return kept


def python_docs_from_interpreter(dropped: Counter) -> list[str]:
    """The paragraphs of the running interpreter's ``pydoc_data.topics`` (how ``data/python-docs.txt`` was
    made, on CPython 3.11.7)."""
    from pydoc_data.topics import topics

    return _keep([p for key in sorted(topics) for p in _paragraphs(topics[key], dropped)], dropped)


def python_docs_paragraphs(dropped: Counter) -> list[str]:
    """The paragraphs of ``data/python-docs.txt``, the same on every interpreter; refused if the file is not
    the one pinned by ``PYTHON_DOCS_SHA256``."""
    text = PYTHON_DOCS.read_text(encoding="utf-8").removesuffix("\n")
    digest = hashlib.sha256(text.encode()).hexdigest()
    if digest != PYTHON_DOCS_SHA256:
        raise ValueError(f"{PYTHON_DOCS} has sha256 {digest}, not the pinned {PYTHON_DOCS_SHA256}: the corpus file "
                         f"was changed; restore it with git checkout -- data/python-docs.txt")
    return text.split("\n\n")


def wikitext_paragraphs(dropped: Counter) -> list[str]:
    try:
        from datasets import load_dataset

        rows = load_dataset("Salesforce/wikitext", "wikitext-2-raw-v1", split="train")["text"]
    except Exception as error:  # noqa: BLE001 — any hub/network failure means the same thing here
        raise RuntimeError(f"corpus 'wikitext-2' needs the Hugging Face hub (or its local cache), which failed: "
                           f"{type(error).__name__}: {error}. Use corpus='python-docs' (offline), a local text "
                           f"file/folder path, or a local copy of WikiText-2 raw (wiki.train.raw).") from error
    return _keep(_wikitext_paragraphs(rows, dropped), dropped)


def local_paragraphs(path: str | os.PathLike, dropped: Counter) -> list[str]:
    """Paragraphs of a local file, or of every text file under a folder. A file in WikiText's layout
    (``is_wikitext``) is read a line at a time, as the paper read WikiText-2; any other file by blank-line
    separated blocks."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in TEXT_SUFFIXES)
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"corpus {str(path)!r} is neither a registered corpus {CORPORA} nor an existing "
                                f"file or folder")
    if not files:
        raise ValueError(f"corpus folder {str(path)!r} holds no {'/'.join(TEXT_SUFFIXES)} files")
    paragraphs = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        paragraphs += (_wikitext_paragraphs(text.splitlines(), dropped) if is_wikitext(f, text)
                       else _paragraphs(text, dropped))
    return _keep(paragraphs, dropped)


def corpus_paragraphs(corpus: str) -> list[str]:
    dropped: Counter = Counter()
    if corpus == "python-docs":
        paragraphs = python_docs_paragraphs(dropped)
    elif corpus == "wikitext-2":
        paragraphs = wikitext_paragraphs(dropped)
    else:
        paragraphs = local_paragraphs(corpus, dropped)
    if not paragraphs:
        what = ", ".join(f"{n} {reason}" for reason, n in dropped.items()) or "nothing: the text is empty"
        raise ValueError(f"corpus {corpus!r} has no paragraph of at least {MIN_CHARS} characters; dropped {what}. "
                         f"Paragraphs are blank-line separated blocks, except in WikiText's layout (a .raw or "
                         f".tokens file, or one with ' = Title = ' lines), where each line is one.")
    return paragraphs


@dataclass
class TokenSample:
    """A tokenised corpus and the token positions sampled from it."""

    corpus: str
    sha256: str  # of the paragraphs' text
    sequences: list[torch.Tensor]  # one [T] id tensor per paragraph, BOS first
    positions: torch.Tensor  # [n, 2] (sequence, position) of each sampled token, sorted
    n_chars: int

    @property
    def n_tokens(self) -> int:
        return sum(len(s) for s in self.sequences)

    def record(self) -> dict:
        return dict(corpus=self.corpus, sha256=self.sha256, paragraphs=len(self.sequences), characters=self.n_chars,
                    tokens=self.n_tokens, sampled=len(self.positions))

    def halves(self) -> dict[str, dict[int, list[int]]]:
        """{"fit": {sequence: [positions]}, "score": {...}}: sequences alternate between the halves
        (even index → fit), so the two halves share no text."""
        out: dict[str, dict[int, list[int]]] = {"fit": {}, "score": {}}
        for seq, pos in self.positions.tolist():
            out["fit" if seq % 2 == 0 else "score"].setdefault(seq, []).append(pos)
        return out


def sample_tokens(tokenizer, corpus: str = "python-docs", n_tokens: int = 16_384, seed: int = 0,
                  max_tokens: int = 256, tokenizer_name: str = "") -> TokenSample:
    """Tokenise the corpus (one sequence per paragraph) and sample ``n_tokens`` positions uniformly without
    replacement, BOS excluded. Cached under a key of every argument and the text's sha256."""
    for name, value, minimum in (("n_tokens", n_tokens, 1), ("max_tokens", max_tokens, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{name}={value!r}: expected an integer ≥ {minimum}"
                             + (" (BOS plus at least one token per paragraph)" if name == "max_tokens" else ""))
    paragraphs = corpus_paragraphs(corpus)
    text_hash = hashlib.sha256("\n\n".join(paragraphs).encode()).hexdigest()
    key = hashlib.sha256(json.dumps([text_hash, tokenizer_name or type(tokenizer).__name__, n_tokens, seed,
                                     max_tokens]).encode()).hexdigest()[:16]
    path = cache_dir("corpus") / f"{key}.pt"
    saved = load_verified(path, "tokenised corpus sample")
    if saved is not None:
        return TokenSample(corpus, text_hash, saved["sequences"], saved["positions"], saved["n_chars"])
    bos = tokenizer.bos_token_id
    # token ids are device-free: built on the CPU (consumers move the batches they run)
    sequences = [torch.tensor([bos] + tokenizer(p, add_special_tokens=False)["input_ids"][: max_tokens - 1], device="cpu")
                 for p in paragraphs]
    candidates = torch.cat([torch.stack([torch.full((len(s) - 1,), i, device="cpu"), torch.arange(1, len(s), device="cpu")], 1)
                            for i, s in enumerate(sequences)])
    if n_tokens > len(candidates):
        raise ValueError(f"n_tokens={n_tokens} exceeds the corpus' {len(candidates)} non-BOS tokens; "
                         f"use a smaller n_tokens or a larger corpus")
    pick = torch.randperm(len(candidates), generator=torch.Generator().manual_seed(seed), device="cpu")[:n_tokens]
    positions = candidates[pick.sort(stable=True).values]
    n_chars = sum(len(p) for p in paragraphs)
    save_verified(dict(sequences=sequences, positions=positions, n_chars=n_chars), path)
    atomic_write_json(path.with_suffix(".json"), dict(corpus=corpus, sha256=text_hash, n_tokens=n_tokens, seed=seed))
    return TokenSample(corpus, text_hash, sequences, positions, n_chars)
