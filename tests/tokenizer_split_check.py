#!/usr/bin/env python3
"""Independent check of tests/tokenizer_test.c's split_cases: runs llama.cpp's pre-tokenizer
patterns for each name with Python's `regex` module (each pattern splits the words of the one
before, matches and the text between them both kept) and compares with the expected words.
Run: python3 tests/tokenizer_split_check.py   (needs `pip install regex`)
"""
import re as _re
import sys

import regex

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
PRES = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "gpt-2": [GPT2],
    "llama3": [LLAMA3], "llama-bpe": [LLAMA3], "dbrx": [LLAMA3],
    "qwen2": [QWEN2],
    "starcoder": [r"\p{N}", GPT2], "smollm": [r"\p{N}", GPT2], "command-r": [r"\p{N}", GPT2],
    "refact": [r"\p{N}", GPT2],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    "deepseek-llm": ["[\r\n]", r"\s?[A-Za-z]+", "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                     r"\s+$", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}+"],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}"],
    "tekken": [r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])"
               r"([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
}


def split(pre, text):
    words = [text]
    for pat in PRES[pre]:
        rx = regex.compile(pat)
        out = []
        for w in words:
            last = 0
            for m in rx.finditer(w):
                if m.end() == m.start():
                    continue
                if m.start() > last:
                    out.append(w[last:m.start()])
                out.append(m.group(0))
                last = m.end()
            if last < len(w):
                out.append(w[last:])
        words = out
    return words


def c_unescape(s):
    return bytes(s, "latin-1").decode("unicode_escape").encode("latin-1").decode("utf-8")


def main():
    src = open(__file__.replace("tokenizer_split_check.py", "tokenizer_test.c"), encoding="utf-8").read()
    body = src[src.index("split_cases[] = {"):src.index("};", src.index("split_cases[] = {"))]
    bad = 0
    for m in _re.finditer(r'\{ "([^"]+)", ((?:"(?:[^"\\]|\\.)*"\s*)+),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\}', body):
        pre = m.group(1)
        text = c_unescape("".join(_re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2))))
        want = c_unescape("".join(_re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(3))))
        got = "|".join(split(pre, text))
        ok = got == want
        bad += not ok
        print("%-4s %-15s %r -> %r%s" % ("ok" if ok else "FAIL", pre, text, got, "" if ok else " want %r" % want))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
