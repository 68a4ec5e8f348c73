#!/usr/bin/env python3
"""Makes the tiny Hugging Face test models of tests/arch_test.c and their transformers goldens.

For each of a Llama 3 (llama3 rope scaling, so the GGUF carries rope_freqs.weight; GQA; separate
output head), a Qwen2 (Q/K/V biases, NEOX rotation, linear rope scaling, tied output head) and a
Qwen3 (per-head q/k RMSNorm, head size 32 != hidden/heads, NEOX rotation) model: builds it from a
config with seeded random weights, saves it with a SentencePiece tokenizer trained here (so that
llama.cpp's converter needs no network), converts it with convert_hf_to_gguf.py (--outtype f32),
and writes <name>.golden: transformers' (float64) logits at every position of a fixed prompt and
its 64-token greedy continuation.

Golden format: one text line "mk-hf-golden 1 <n_vocab> <n_prompt> <n_total>\n", one line of the
n_total token ids, then n_total * n_vocab little-endian float32 logits (row t: the logits after
token t, i.e. the prediction of token t + 1).

CI has neither torch nor transformers, so the outputs are committed; rerun this to remake them:

  python3 tests/hf/make_hf_models.py --convert <llama.cpp>/convert_hf_to_gguf.py --out tests/data

(convert_hf_to_gguf.py is in the llama-cpp-python sdist: pip download --no-binary :all:
--no-deps llama-cpp-python). Needs torch, transformers, sentencepiece, numpy.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch
import transformers

VOCAB = 160
PROMPT = [1, 17, 42, 99, 7, 130, 64, 23]
N_NEW = 64


def train_tokenizer(folder):
    """A SentencePiece unigram model of VOCAB pieces over seeded pseudo-words."""
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters[: rng.randint(4, 26)]) for _ in range(rng.randint(1, 7))) for _ in range(400)]
    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w") as f:
        for _ in range(3000):
            f.write(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(folder, "tokenizer"), vocab_size=VOCAB, model_type="unigram",
        character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0, pad_id=-1, num_threads=1, minloglevel=2,
        seed_sentencepiece_size=20000)
    return os.path.join(folder, "tokenizer.model")


def configs():
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1, eos_token_id=2,
                  torch_dtype="float32")
    return [
        ("hf_llama3", transformers.LlamaConfig(
            **common, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 32})),
        ("hf_qwen2", transformers.Qwen2Config(
            **common, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=True,
            rope_scaling={"rope_type": "linear", "factor": 2.0})),
        ("hf_qwen3", transformers.Qwen3Config(
            **common, head_dim=32, rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False)),
    ]


def randomize(model, seed):
    """Every parameter random (transformers zeroes biases and sets norms to 1): norms near 1, the rest
    wide enough that the logits are far from ties."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                p.copy_(0.5 * noise)
            elif "embed_tokens" in name:
                p.copy_(noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5)


def golden(model):
    """Greedy continuation with full forward passes in float64, and the logits of the whole sequence."""
    m = model.to(torch.float64)
    ids = list(PROMPT)
    with torch.no_grad():
        for _ in range(N_NEW):
            logits = m(torch.tensor([ids])).logits[0, -1]
            ids.append(int(torch.argmax(logits)))
        logits = m(torch.tensor([ids])).logits[0].numpy()
    return ids, logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--convert", required=True, help="llama.cpp's convert_hf_to_gguf.py")
    ap.add_argument("--out", default="tests/data")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tok = train_tokenizer(tmp)
        for seed, (name, cfg) in enumerate(configs()):
            cfg._attn_implementation = "eager"
            torch.manual_seed(seed)
            model = transformers.AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
            randomize(model, 1000 + seed)
            hf_dir = os.path.join(tmp, name)
            model.save_pretrained(hf_dir, safe_serialization=True)
            with open(tok, "rb") as src, open(os.path.join(hf_dir, "tokenizer.model"), "wb") as dst:
                dst.write(src.read())
            with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
                json.dump({"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                           "unk_token": "<unk>", "tokenizer_class": "LlamaTokenizer"}, f)
            gguf_path = os.path.join(args.out, name + ".gguf")
            subprocess.run([sys.executable, args.convert, hf_dir, "--outtype", "f32", "--outfile", gguf_path],
                           check=True, stdout=subprocess.DEVNULL)
            ids, logits = golden(model)
            top2 = np.sort(logits, axis=1)[:, -2:]
            gap = float(np.min(top2[len(PROMPT) - 1:, 1] - top2[len(PROMPT) - 1:, 0]))
            with open(os.path.join(args.out, name + ".golden"), "wb") as f:
                f.write(b"mk-hf-golden 1 %d %d %d\n" % (logits.shape[1], len(PROMPT), len(ids)))
                f.write((" ".join(str(i) for i in ids) + "\n").encode())
                f.write(logits.astype("<f4").tobytes())
            print(f"{name}: {os.path.getsize(gguf_path)} bytes, tokens {ids[len(PROMPT):][:12]}..., "
                  f"smallest top-2 logit gap over the greedy steps {gap:.4g}, logit range "
                  f"[{logits.min():.3g}, {logits.max():.3g}]")


if __name__ == "__main__":
    main()
