"""DVC stage `prepare`: the merged training set tokenized once into `prepare.out_dir`.

Run from the repository root: `python -m stages.prepare`. Reads `distill.out_jsonl` and the
SentencePiece model in `tokenizer.out_dir`; writes a memory-mapped corpus folder
(`pipeline.data.corpus`: `src.bin`, `tgt.bin`, their `.idx.npy` offsets and `meta.json`, which
records the tokenizer's SHA-256 so `train` refuses ids of another tokenizer). Pairs with a side
over `train.max_len` pieces are dropped and counted. A bad line of the merged set is a one-line
error and nothing is written.
"""

from __future__ import annotations

from pipeline.core.config import load_params
from pipeline.core.errors import run_main
from pipeline.data.prepare import prepare
from pipeline.data.tokenizer import Tokenizer, model_file, model_sha256


def main() -> None:
    params = load_params()
    spm = model_file(params.tokenizer.out_dir)
    meta = prepare(
        params.distill.out_jsonl,
        Tokenizer.load(spm),
        params.prepare.out_dir,
        params.train.max_len,
        params.download.tgt_lang,
        {"spm_sha256": model_sha256(spm), "tgt_lang": params.download.tgt_lang},
    )
    print(
        f"prepare: {meta['pairs']} pairs ({meta['dropped_max_len']} dropped: a side over "
        f"{meta['max_len']} pieces) -> {params.prepare.out_dir} ({meta['dtype']} ids)"
    )


if __name__ == "__main__":
    run_main(main)
