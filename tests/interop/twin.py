"""Helpers of the generative interop tests: a Hugging Face tokenizer the peers can load offline,
model repositories made from the bundled zoo's generative configs, the twin's per-request records
(`--record-requests`) and how a client's figure is held against them."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "src" / "server" / "llm" / "corpus.txt"
ZOO = ROOT / "src" / "server" / "zoo"


def train_tokenizer(directory):
    """A small byte-level BPE trained on the twin's own corpus, saved as a Hugging Face tokenizer
    directory in `directory`: the peers count tokens with one, and none can be downloaded here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=3000,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS.read_text()] * 3, trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(str(directory))
    return Path(directory)


def zoo_config(name, **parameters):
    """The zoo's `NAME.pbtxt` with `parameters` set (string values), replacing the zoo's value of
    a key it has and adding the others: a test changes the cost model, and keeps whatever else
    the zoo's model is (its reasoning settings, say)."""
    path = ZOO / f"{name}.pbtxt"
    if not path.is_file():
        raise FileNotFoundError(f"the zoo has no {name} ({path})")
    text = path.read_text()
    for key, value in parameters.items():
        line = f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
        pattern = re.compile(r'parameters\s*\{\s*key:\s*"' + re.escape(key) + r'".*?\}\s*\}')
        text, found = pattern.subn(line, text)
        if not found:
            text += line + "\n"
    return text


def read_records(path):
    """The twin's `--record-requests` lines, decoded."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def metric_ms(record, name):
    """A metric of one line of an AIPerf-shaped `profile_export.jsonl`, in ms (None if absent)."""
    m = record["metrics"].get(name)
    if m is None:
        return None
    value = m["value"] if isinstance(m, dict) else m
    unit = m.get("unit", "ms") if isinstance(m, dict) else "ms"
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}.get(unit, None)
    return value * scale if scale is not None else value


def close_to_truth(name, theirs, ours, client="AIPerf"):
    """A client's figure against the server's own instants: never earlier (1 ms for the two
    clocks' reads), and late by at most 5%."""
    gap = theirs - ours
    print(f"{name}: {client} {theirs:.2f} ms, server {ours:.2f} ms, gap {gap:+.2f} ms ({gap / ours:+.1%})")
    assert gap >= -1.0, (name, theirs, ours)
    assert gap <= 0.05 * ours, (name, theirs, ours)
