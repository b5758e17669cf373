"""DVC stage `prepare`: the merged training set tokenized once into `prepare.out_dir`.

Run from the repository root: `python -m stages.prepare`. Writes a memory-mapped corpus folder
(`pipeline.data.corpus`) whose meta records the tokenizer's SHA-256; pairs over `train.max_len`
pieces are dropped; with `prepare.sampling_alpha`, each pair is written `sampling_copies` times.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pipeline.core.errors import run_main
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent, sigterm_raises
from pipeline.data.prepare import Sampling, check_space, estimate, prepare
from pipeline.data.tokenizer import Tokenizer, model_file, model_sha256


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    params = stage_params(argv)
    spm = model_file(params.tokenizer.out_dir)
    cfg, merged, tgt = params.prepare, params.distill.out_jsonl, params.download.tgt_lang
    sampling = None
    if cfg.sampling_alpha is not None:
        sampling = Sampling(alpha=cfg.sampling_alpha, copies=cfg.sampling_copies, seed=cfg.sampling_seed)
    tok = Tokenizer.load(spm)
    size = estimate(merged, tok, tgt, sampling)
    free = check_space(cfg.out_dir, size)
    print(
        f"prepare: {size.pairs} pairs x {size.copies} copies, about {size.bytes / 1e9:.2f} GB "
        f"({free / 1e9:.1f} GB free) -> {cfg.out_dir}",
        file=sys.stderr,
    )
    with sigterm_raises(f"prepare: stopped by SIGTERM; {cfg.out_dir} is unchanged"):
        meta = prepare(
            merged,
            tok,
            cfg.out_dir,
            max_len=params.train.max_len,
            tgt=tgt,
            meta={"spm_sha256": model_sha256(spm), "tgt_lang": tgt},
            sampling=sampling,
            progress=sys.stderr.isatty(),
        )
    print(
        f"prepare: {meta['pairs']} pairs ({meta['dropped_max_len']} dropped: a side over "
        f"{meta['max_len']} pieces) -> {cfg.out_dir} ({meta['dtype']} ids)"
    )


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
