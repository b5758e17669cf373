"""DVC stage `train`: the Transformer on Multi30k.

Usage: `python -m stages.train CKPT_DIR LOG_CSV SUMMARY_JSON`. Writes checkpoints
(`last.pt`, `best.pt`, the last N `step*.pt`) and the final model `model.pt` to CKPT_DIR,
the per-validation log to LOG_CSV and the run's facts to SUMMARY_JSON. Resumes from
CKPT_DIR/last.pt when it belongs to the same params and data.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from pathlib import Path

import datasets
import torch

from pipeline import checkpoint
from pipeline import device as dev
from pipeline.config import Params, load_params
from pipeline.data import load_corpus
from pipeline.errors import run_main
from pipeline.evaluate import greedy_scorer
from pipeline.io import write_json
from pipeline.metrics import score as sacrebleu_score
from pipeline.model import Transformer
from pipeline.tokenizer import Tokenizer
from pipeline.train import Trainer, final_model, validation_loss


def encode_pairs(tok: Tokenizer, en: list[str], de: list[str], max_len: int | None = None) -> list:
    """(src ids, tgt ids) per pair; pairs with a side over `max_len` pieces are dropped."""
    pairs = list(zip(tok.encode_batch(en), tok.encode_batch(de), strict=True))
    return [p for p in pairs if max_len is None or max(len(p[0]), len(p[1])) <= max_len]


def fingerprint(params: Params, spm_path: Path, n_pairs: int) -> str:
    """Identifies the run's inputs: train params, tokenizer bytes, data size."""
    h = hashlib.sha256(params.train.model_dump_json().encode())
    h.update(params.download.model_dump_json().encode())
    h.update(spm_path.read_bytes())
    h.update(str(n_pairs).encode())
    return h.hexdigest()


def main(out_dir: Path, log_csv: Path, summary_json: Path) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg, corpus = params.train, load_corpus(params.download.out_dir)
    spm_path = Path(params.tokenizer.out_dir) / "spm.model"
    tok = Tokenizer.load(spm_path)
    device, bf16 = dev.setup(cfg.optim.device, cfg.optim.precision, cfg.optim.threads)
    train_pairs = encode_pairs(tok, corpus["train"]["en"], corpus["train"]["de"], cfg.max_len)
    val = corpus["val"].select(range(min(len(corpus["val"]), cfg.val_max_sentences or len(corpus["val"]))))
    val_pairs = encode_pairs(tok, val["en"], val["de"])
    bleu = greedy_scorer(
        [s for s, _ in val_pairs], val["de"], tok.decode, lambda h, r: sacrebleu_score(h, r)["bleu"],
        tok.bos_id, tok.eos_id, device,
    )  # fmt: skip

    def validate(model: Transformer) -> dict[str, float]:
        loss = validation_loss(model, val_pairs, cfg.optim.max_tokens, tok.bos_id, tok.eos_id, device)
        return {"val_loss": loss, "val_bleu": bleu(model)}

    model = Transformer(cfg.model, tok.vocab_size, tok.pad_id)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"train: {len(train_pairs)} pairs, {n_params} parameters, device {device}, bf16 {bf16}")
    trainer = Trainer(
        model, train_pairs, validate, cfg.optim, out_dir, log_csv, tok.bos_id, tok.eos_id, "val_bleu",
        fingerprint(params, spm_path, len(train_pairs)), meta={}, device=device, use_bf16=bf16,
    )  # fmt: skip
    progress = trainer.run()
    state, choice = final_model(out_dir, progress.kept, validate, "val_bleu")
    checkpoint.save(out_dir / "model.pt", state)
    rows = progress.log
    write_json(
        summary_json,
        {
            "parameters": n_params,
            "train_pairs": len(train_pairs),
            "steps": progress.step,
            "epochs": progress.epoch,
            "wall_seconds": round(progress.wall_seconds, 1),
            "mean_tokens_per_s": round(sum(r["tokens_per_s"] for r in rows) / max(len(rows), 1), 1),
            "device": str(device),
            "bf16": bf16,
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "final_model": choice,
            "model": cfg.model.model_dump(),
            "optim": cfg.optim.model_dump(),
        },
    )
    print(
        f"train: final model {choice['source']} val BLEU {choice['val_bleu']:.2f} -> {out_dir / 'model.pt'}"
    )


if __name__ == "__main__":
    run_main(lambda: main(*map(Path, sys.argv[1:4])))
