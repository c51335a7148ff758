"""A model folder is checked as a whole before any run uses it: each defect refused with its own message, at
the real shapes (a config.json suffices where the refusal comes before any weight is read)."""
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers.core.folder_checks import (MIN_TOKENIZER_ENTRIES, ModelFolderError, TokenizerSpec, check_tokenizer,
                                        shapes, tokenizer_sha256)
from helpers.core.models import GPT2_TOKENIZER, MODELS, converted_gguf_folder, gpt2_tokenizer, load_model, tiny_hf_model
from helpers.core.stand_ins import write_gemma2_tokenizer, write_stand_in


def config_only(folder, name="gemma-2-2b", **changes):
    """A folder holding only ``name``'s published config.json (with ``changes``): enough for every refusal that
    comes before the weights are read."""
    from transformers import AutoConfig

    options = {**MODELS[name].published_config, **changes}
    folder.mkdir(parents=True, exist_ok=True)
    AutoConfig.for_model(options.pop("model_type"), **options).save_pretrained(folder)
    return folder


def degenerate_tokenizer(folder, n=5):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, **{f"w{i}": i for i in range(4, n)}}
    Tokenizer(WordLevel(vocab, unk_token="<unk>")).save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(dict(
        tokenizer_class="PreTrainedTokenizerFast", bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
        unk_token="<unk>")))


@pytest.fixture(scope="module")
def gpt2_one_layer(tmp_path_factory):
    """GPT-2 small at its real widths, cut to its first layer (declared): 46 M parameters."""
    return write_stand_in("gpt2-small", tmp_path_factory.mktemp("gpt2-1"), n_layers=1)


# --- shapes and architecture -------------------------------------------------------------------------------

def test_a_folder_with_no_tokenizer_is_refused_before_its_weights_are_read(tmp_path):
    config_only(tmp_path)
    with pytest.raises(ModelFolderError, match="holds no tokenizer files.*google/gemma-2-2b.*Never copy another"):
        load_model("gemma-2-2b", weights_dir=tmp_path)


def test_an_empty_tokenizer_is_refused_as_degenerate(tmp_path):
    config_only(tmp_path)
    degenerate_tokenizer(tmp_path)
    with pytest.raises(ModelFolderError, match=r"degenerate: 5 entries \(fewer than 1000\).*replace the tokenizer"):
        load_model("gemma-2-2b", weights_dir=tmp_path)


def test_the_degenerate_floor_is_inclusive_at_its_boundary():
    class Sized:
        bos_token_id = eos_token_id = pad_token_id = 0

        def __init__(self, n):
            self.n = n

        def __len__(self):
            return self.n

    check_tokenizer("x", Sized(MIN_TOKENIZER_ENTRIES), None, 10 ** 6, "here")
    with pytest.raises(ModelFolderError, match="degenerate"):
        check_tokenizer("x", Sized(MIN_TOKENIZER_ENTRIES - 1), None, 10 ** 6, "here")
    check_tokenizer("x", Sized(2000), None, 2000, "here")  # as many entries as embedding rows: fine
    with pytest.raises(ModelFolderError, match="2001 entries, but the model embeds only 2000"):
        check_tokenizer("x", Sized(2001), None, 2000, "here")


def test_another_models_tokenizer_is_refused_naming_what_differs(tmp_path):
    config_only(tmp_path)
    smollm2 = converted_gguf_folder(MODELS["smollm2-135m"])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(smollm2 / name, tmp_path / name)
    with pytest.raises(ModelFolderError, match=r"does not match.*entries 49152 \(not 256000\); bos 1 \(not 2\); "
                                               r"eos 2 \(not 1\); pad 2 \(not 0\).*another model's tokenizer"):
        load_model("gemma-2-2b", weights_dir=tmp_path)


def test_a_larger_tokenizer_than_the_embedding_is_refused(tmp_path):
    config_only(tmp_path)
    gemma3 = converted_gguf_folder(MODELS["gemma-3-270m"])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(gemma3 / name, tmp_path / name)
    with pytest.raises(ModelFolderError, match="262144 entries, but the model embeds only 256000 ids"):
        load_model("gemma-2-2b", weights_dir=tmp_path)


def test_declared_word_ids_catch_a_tokenizer_of_the_right_size_and_special_ids():
    tokenizer = gpt2_tokenizer()
    check_tokenizer("gpt2-small", tokenizer, GPT2_TOKENIZER, 50257, "")
    wrong = TokenizerSpec(entries=50257, bos=50256, eos=50256, pad=None, words=(("hello", (31374,)),))
    with pytest.raises(ModelFolderError, match=r"'hello' → \[31373\] \(not \[31374\]\)"):
        check_tokenizer("gpt2-small", tokenizer, wrong, 50257, "")


def test_every_registry_tokenizer_matches_its_declaration():
    for name in ("smollm2-135m", "gemma-3-270m", "tiny-gpt2"):
        load_model(name)  # refused on any mismatch


def test_the_gemma2_stand_in_tokenizer_meets_what_the_registry_checks(tmp_path):
    from transformers import AutoTokenizer

    write_gemma2_tokenizer(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    check_tokenizer("gemma-2-2b", tokenizer, MODELS["gemma-2-2b"].tokenizer, 256000, str(tmp_path))
    assert tokenizer("When Mary and John", add_special_tokens=False)["input_ids"] == [4420, 8712, 532, 3415]


def test_a_config_of_another_architecture_is_refused(tmp_path):
    tiny_hf_model(MODELS["tiny-gemma3"], seed=0).save_pretrained(tmp_path)
    with pytest.raises(ModelFolderError, match="model_type 'gemma3_text'.*'gpt2-small' is a 'gpt2' model"):
        load_model("gpt2-small", weights_dir=tmp_path)


def test_other_widths_are_refused_naming_each(tmp_path):
    config_only(tmp_path, hidden_size=2048, num_key_value_heads=8)
    with pytest.raises(ModelFolderError, match=r"d_model 2048 \(not 2304\), n_kv_heads 8 \(not 4\).*not 'gemma-2-2b'"):
        load_model("gemma-2-2b", weights_dir=tmp_path)


def test_an_undeclared_truncation_is_refused_naming_the_declaration(tmp_path, monkeypatch):
    monkeypatch.delenv("SVDIRS_LAYERS_GEMMA_2_2B", raising=False)
    config_only(tmp_path, num_hidden_layers=4)
    with pytest.raises(ModelFolderError, match=r"has 4 layers where 'gemma-2-2b' has 26.*truncated_layers=4"
                                               r".*\$SVDIRS_LAYERS_GEMMA_2_2B=4"):
        load_model("gemma-2-2b", weights_dir=tmp_path)
    with pytest.raises(ModelFolderError, match="truncated_layers=3 was declared, but its config.json has 4"):
        load_model("gemma-2-2b", weights_dir=tmp_path, truncated_layers=3)


def test_a_truncation_declared_on_a_whole_model_or_out_of_range_is_refused(tmp_path):
    config_only(tmp_path)
    with pytest.raises(ModelFolderError, match="declared, but its config.json has 26 layers.*whole model"):
        load_model("gemma-2-2b", weights_dir=tmp_path, truncated_layers=4)
    for bad in (0, 26):
        with pytest.raises(ModelFolderError, match=f"truncated_layers={bad}.*keeps 1 to 25"):
            load_model("gemma-2-2b", weights_dir=tmp_path, truncated_layers=bad)


def test_truncation_is_declared_for_hub_models_only_and_by_a_whole_number(monkeypatch):
    with pytest.raises(ValueError, match="only hub models"):
        load_model("tiny-gpt2", truncated_layers=1)
    monkeypatch.setenv("SVDIRS_LAYERS_GPT2_SMALL", "four")
    with pytest.raises(ValueError, match=r"\$SVDIRS_LAYERS_GPT2_SMALL='four' is not a whole number"):
        load_model("gpt2-small")


# --- the weights -------------------------------------------------------------------------------------------

def test_a_truncated_safetensors_file_is_refused(tmp_path, gpt2_one_layer):
    folder = tmp_path / "cut"
    shutil.copytree(gpt2_one_layer, folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelFolderError, match=f"weights in {folder} cannot be read.*truncated.*replace"):
        load_model("gpt2-small", weights_dir=folder, truncated_layers=1)


def test_weights_missing_a_tensor_are_refused_not_filled_at_random(tmp_path, gpt2_one_layer):
    folder = tmp_path / "missing"
    shutil.copytree(gpt2_one_layer, folder)
    tensors = load_file(folder / "model.safetensors")
    del tensors["transformer.h.0.mlp.c_fc.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelFolderError, match=r"lack 1 of 'gpt2-small''s tensors \(transformer.h.0.mlp.c_fc.weight\)"):
        load_model("gpt2-small", weights_dir=folder, truncated_layers=1)


def test_a_declared_truncation_loads_and_its_record_says_so(gpt2_one_layer, monkeypatch):
    model = load_model("gpt2-small", weights_dir=gpt2_one_layer, truncated_layers=1)
    assert model.record()["truncation"] == "first 1 of 12 layers" and model.n_layers == 1
    monkeypatch.setenv("SVDIRS_LAYERS_GPT2_SMALL", "1")
    assert load_model("gpt2-small", weights_dir=gpt2_one_layer).record()["truncation"] == "first 1 of 12 layers"


def test_a_complete_folder_at_the_real_shapes_loads_with_both_fingerprints(tmp_path):
    folder = write_stand_in("gpt2-small", tmp_path / "gpt2", seed=3)
    model = load_model("gpt2-small", weights_dir=folder)
    record = model.record()
    assert {k: record[k] for k in ("n_layers", "d_model", "n_heads", "d_mlp")} == dict(n_layers=12, d_model=768,
                                                                                        n_heads=12, d_mlp=3072)
    assert "truncation" not in record and "tokenizer_unchecked" not in record
    pinned = gpt2_tokenizer()
    pinned.pad_token = pinned.eos_token  # as TransformerLens' bridge sets it: the tokenizer the run uses
    assert record["tokenizer_sha256"] == tokenizer_sha256(pinned)
    # the weights digest names the file's tensors: the same for the same file, another for another seed
    assert record["weights_sha256"] == load_model("gpt2-small", weights_dir=folder).weights_sha256
    saved = load_file(folder / "model.safetensors")
    torch.testing.assert_close(model.hf_model.transformer.h[5].attn.c_attn.weight,
                               saved["transformer.h.5.attn.c_attn.weight"].float(), rtol=0, atol=0)
    other = write_stand_in("gpt2-small", tmp_path / "other", n_layers=1, seed=4)
    assert load_model("gpt2-small", weights_dir=other, truncated_layers=1).weights_sha256 != record["weights_sha256"]


def test_gemma2s_record_says_what_its_tokenizer_check_left_out():
    assert "word ids" in MODELS["gemma-2-2b"].tokenizer.unchecked
    assert MODELS["gemma-2-2b"].tokenizer.words == ()


# --- fingerprints ------------------------------------------------------------------------------------------

def test_the_tokenizer_fingerprint_changes_with_any_id_or_special_id(tmp_path):
    from transformers import AutoTokenizer

    degenerate_tokenizer(tmp_path, n=8)
    a = AutoTokenizer.from_pretrained(tmp_path)
    assert tokenizer_sha256(a) == tokenizer_sha256(AutoTokenizer.from_pretrained(tmp_path))
    vocab = json.loads((tmp_path / "tokenizer.json").read_text())
    vocab["model"]["vocab"]["w5"], vocab["model"]["vocab"]["w6"] = 6, 5  # two ids swapped
    (tmp_path / "tokenizer.json").write_text(json.dumps(vocab))
    assert tokenizer_sha256(AutoTokenizer.from_pretrained(tmp_path)) != tokenizer_sha256(a)
    a.pad_token = "<eos>"
    assert tokenizer_sha256(a) != tokenizer_sha256(AutoTokenizer.from_pretrained(tmp_path)) != tokenizer_sha256(a)


def test_shapes_read_gpt2_and_gemma2_configs_in_the_projects_names():
    from transformers import AutoConfig

    gpt2 = shapes(AutoConfig.for_model("gpt2", n_layer=12, n_embd=768, n_head=12))
    assert gpt2 == dict(n_layers=12, d_model=768, n_heads=12, n_kv_heads=12, d_head=64, d_mlp=3072, vocab_size=50257)
    options = dict(MODELS["gemma-2-2b"].published_config)
    gemma = shapes(AutoConfig.for_model(options.pop("model_type"), **options))
    assert gemma == dict(n_layers=26, d_model=2304, n_heads=8, n_kv_heads=4, d_head=256, d_mlp=9216, vocab_size=256000)


def test_a_plant_forgets_the_weights_digest_taken_before_it():
    from types import SimpleNamespace

    from helpers.singular.validation.planted import apply_plant

    model = load_model("tiny-llama", seed=0)  # d_model 32, 4 heads of 8, 2 KV groups
    before = model.weights_sha256
    plant = SimpleNamespace(spec=SimpleNamespace(layer=1, head=2), dim=3, query_row=torch.ones(32),
                            key_row=torch.ones(32), dW_V=torch.ones(32, 8), dW_O=torch.ones(8, 32))
    apply_plant(model, plant)
    assert model.weights_sha256 != before
    assert model.record()["weights_sha256"] == model.weights_sha256
