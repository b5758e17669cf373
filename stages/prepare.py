"""DVC stage `prepare`: the merged training set tokenized once into `prepare.out_dir`.

Run from the repository root: `python -m stages.prepare`. Writes a memory-mapped corpus folder
(`pipeline.data.corpus`) whose meta records the tokenizer's SHA-256; pairs over `train.max_len`
pieces are dropped; with `prepare.sampling_alpha`, each pair is written `sampling_copies` times.
"""

from __future__ import annotations

from pipeline.core.config import load_params
from pipeline.core.errors import run_main
from pipeline.data.prepare import Sampling, prepare
from pipeline.data.tokenizer import Tokenizer, model_file, model_sha256


def main() -> None:
    params = load_params()
    spm = model_file(params.tokenizer.out_dir)
    cfg = params.prepare
    sampling = None
    if cfg.sampling_alpha is not None:
        sampling = Sampling(alpha=cfg.sampling_alpha, copies=cfg.sampling_copies, seed=cfg.sampling_seed)
    meta = prepare(
        params.distill.out_jsonl,
        Tokenizer.load(spm),
        params.prepare.out_dir,
        max_len=params.train.max_len,
        tgt=params.download.tgt_lang,
        meta={"spm_sha256": model_sha256(spm), "tgt_lang": params.download.tgt_lang},
        sampling=sampling,
    )
    print(
        f"prepare: {meta['pairs']} pairs ({meta['dropped_max_len']} dropped: a side over "
        f"{meta['max_len']} pieces) -> {params.prepare.out_dir} ({meta['dtype']} ids)"
    )


if __name__ == "__main__":
    run_main(main)
