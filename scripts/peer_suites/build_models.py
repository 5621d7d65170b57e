"""Build the model directories the peers' tests are served from: a published
``tokenizer.json`` and a ``tokenizer_config.json`` with the family's chat template
and special tokens, no weights (the table in ``scripts/peer_suites.md``).

    python3 scripts/peer_suites/build_models.py --shared ../shared \\
        --qwen3 /tmp/mtok-qwen3/package/models --out /tmp/mtok-peer-models

``--shared`` is the folder holding ``tokenizers/`` and ``chat_templates/`` (their
READMEs say where each file comes from); ``--qwen3`` a directory with Qwen3's own
``tokenizer_config.json``, whose chat template is used.  Nothing is copied into
the repository: the directories go to ``--out``:

- ``llama3``: the cl100k BPE (dolma2) with its vocabulary padded to 128000 and
  Llama 3's 256 special tokens at Llama 3's ids (``<|eot_id|>`` = 128009, eos),
  ``<|begin_of_text|>`` prepended as Llama 3's tokenizer does; Llama 3's template.
- ``qwen3``: the cl100k BPE plus ``<think>``, ``</think>``, ``<tool_call>``,
  ``</tool_call>`` (it has ``<|im_start|>`` and ``<|im_end|>``, eos); Qwen3's template.
- ``mistral`` / ``zephyr``: Mistral 7B's tokenizer; an ``[INST]`` template / zephyr's.
- ``bert``: bert-base-uncased; no template.
"""

import argparse
import copy
import json
import os

LLAMA3_SPECIAL = {128000: "<|begin_of_text|>", 128001: "<|end_of_text|>", 128004: "<|finetune_right_pad_id|>",
                  128006: "<|start_header_id|>", 128007: "<|end_header_id|>", 128008: "<|eom_id|>",
                  128009: "<|eot_id|>", 128010: "<|python_tag|>"}

# [INST] ... [/INST]; a system message goes before the first user turn (so the
# tests' system + user conversations render)
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% set ns.system = message['content'] + '\\n\\n' %}"
    "{% elif message['role'] == 'user' %}{{ '[INST] ' + ns.system + message['content'] + ' [/INST]' }}"
    "{% set ns.system = '' %}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}"
    "{% endif %}{% endfor %}"
)

# HuggingFaceH4/zephyr-7b-beta's tokenizer_config.json chat_template
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def added(id_, content, special=True):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def llama3_tokenizer(cl100k):
    tok = copy.deepcopy(cl100k)
    vocab = tok["model"]["vocab"]
    for i in range(len(vocab), 128000):  # unreachable fillers, plain ASCII so ByteLevel decodes them
        vocab[f"<|reserved_filler_{i}|>"] = i
    names = {i: LLAMA3_SPECIAL.get(i) for i in range(128000, 128256)}
    reserved = iter(range(256))
    for i in sorted(names):
        if names[i] is None:
            names[i] = f"<|reserved_special_token_{next(reserved)}|>"  # 0 at 128002 ... 247 at 128255
    tok["added_tokens"] = [added(i, names[i]) for i in sorted(names)]
    bos = "<|begin_of_text|>"
    tok["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {bos: {"id": bos, "ids": [128000], "tokens": [bos]}},
    }
    return tok


def qwen3_tokenizer(cl100k):
    tok = copy.deepcopy(cl100k)
    start = len(tok["model"]["vocab"])
    for k, content in enumerate(["<think>", "</think>", "<tool_call>", "</tool_call>"]):
        tok["added_tokens"].append(added(start + k, content, special=False))  # not special, as in Qwen3's
    return tok


def config(tok, **fields):
    """tokenizer_config.json: the fields, and added_tokens_decoder from the tokenizer."""
    out = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    out.update(fields)
    out["added_tokens_decoder"] = {
        str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
        for a in tok["added_tokens"]}
    return out


def write(out, name, tok, cfg):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    print(d)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", required=True, help="folder with tokenizers/ and chat_templates/")
    ap.add_argument("--qwen3", required=True, help="directory with Qwen3's tokenizer_config.json")
    ap.add_argument("--out", default="/tmp/mtok-peer-models")
    a = ap.parse_args()
    tokenizers, templates = os.path.join(a.shared, "tokenizers"), os.path.join(a.shared, "chat_templates")
    cl100k = load(os.path.join(tokenizers, "dolma2-cl100k.json"))
    mistral = load(os.path.join(tokenizers, "mistral-7b-v0.1.json"))
    bert = load(os.path.join(tokenizers, "bert-base-uncased.json"))
    llama_template = load(os.path.join(templates, "llama3.json"))["chat_template"]
    qwen_template = load(os.path.join(a.qwen3, "tokenizer_config.json"))["chat_template"]

    tok = llama3_tokenizer(cl100k)
    write(a.out, "llama3", tok, config(tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                       model_max_length=131072, chat_template=llama_template))
    tok = qwen3_tokenizer(cl100k)
    write(a.out, "qwen3", tok, config(tok, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                      additional_special_tokens=["<|im_start|>", "<|im_end|>"],
                                      model_max_length=131072, chat_template=qwen_template))
    common = dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>", add_bos_token=True, add_eos_token=False,
                  model_max_length=32768)
    write(a.out, "mistral", mistral, config(mistral, chat_template=MISTRAL_TEMPLATE, **common))
    write(a.out, "zephyr", mistral, config(mistral, chat_template=ZEPHYR_TEMPLATE, **common))
    write(a.out, "bert", bert, config(bert, do_lower_case=True, unk_token="[UNK]", sep_token="[SEP]",
                                      pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                                      model_max_length=512))


if __name__ == "__main__":
    main()
