"""DVC stage `warmup_train`: our Transformer on number-to-words, gated on test exact match.

Usage: `python -m stages.warmup_train CKPT_DIR LOG_CSV REPORT_JSON`. Writes REPORT_JSON
(`test_exact_match`, ...) and exits non-zero when exact match < `warmup_train.threshold`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import datasets

from pipeline import device as dev
from pipeline.checkpoint import build_model
from pipeline.config import load_params
from pipeline.data import load_corpus
from pipeline.errors import PipelineError, run_main
from pipeline.evaluate import exact_match, greedy_scorer
from pipeline.io import write_json
from pipeline.model import Transformer
from pipeline.tokenizer import BOS_ID, EOS_ID, PAD_ID
from pipeline.train import Trainer, final_model, validation_loss
from pipeline.warmup import WarmupVocab


def main(out_dir: Path, log_csv: Path, report_json: Path) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg, data, vocab = params.warmup_train, load_corpus(params.warmup_data.out_dir), WarmupVocab()
    device, bf16 = dev.setup(cfg.optim.device, cfg.optim.precision, cfg.optim.threads)

    def pairs(split: str) -> list[tuple[list[int], list[int]]]:
        return [
            (vocab.encode_src(s), vocab.encode_tgt(t))
            for s, t in zip(data[split]["src"], data[split]["tgt"], strict=True)
        ]

    def scorer(split: str):
        srcs = [s for s, _ in pairs(split)]
        return greedy_scorer(srcs, data[split]["tgt"], vocab.decode, exact_match, BOS_ID, EOS_ID, device)

    val_pairs, val_exact_match = pairs("val"), scorer("val")

    def validate(model: Transformer) -> dict[str, float]:
        loss = validation_loss(model, val_pairs, cfg.optim.max_tokens, BOS_ID, EOS_ID, device)
        return {"val_loss": loss, "val_exact_match": val_exact_match(model)}

    trainer = Trainer(
        Transformer(cfg.model, vocab.vocab_size, PAD_ID), pairs("train"), validate, cfg.optim, out_dir, log_csv,
        bos_id=BOS_ID, eos_id=EOS_ID, score_name="val_exact_match",
        fingerprint=cfg.model_dump_json() + params.warmup_data.model_dump_json(), meta={},
        device=device, use_bf16=bf16,
    )  # fmt: skip
    progress = trainer.run()
    state, choice = final_model(out_dir, progress.kept, validate, "val_exact_match")
    test_exact_match = scorer("test")(build_model(state).to(device))
    write_json(
        report_json,
        {
            "test_exact_match": test_exact_match,
            "threshold": cfg.threshold,
            "steps": progress.step,
            "wall_seconds": round(progress.wall_seconds, 1),
            "final_model": choice["source"],
        },
    )
    print(f"warmup_train: test exact match {test_exact_match:.4f} (threshold {cfg.threshold})")
    if test_exact_match < cfg.threshold:
        raise PipelineError(f"warmup gate failed: test exact match {test_exact_match:.4f} < {cfg.threshold}")


if __name__ == "__main__":
    run_main(lambda: main(*map(Path, sys.argv[1:4])))
