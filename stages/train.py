"""DVC stage `train`: the Transformer on Multi30k.

Usage: `python -m stages.train CKPT_DIR LOG_CSV SUMMARY_JSON RUN_ID_FILE`. Writes checkpoints
(`last.pt`, `best.pt`, the last N `step*.pt`) and the final model `model.pt` to CKPT_DIR,
the per-validation log to LOG_CSV, the run's facts to SUMMARY_JSON and the MLflow run id to
RUN_ID_FILE (empty when `mlflow.enabled` is false). Resumes from CKPT_DIR/last.pt (and its
MLflow run) when it belongs to the same params and data.

With `train.dist.nproc_per_node` or `nnodes` above 1 the stage relaunches itself under
`torchrun` (DistributedDataParallel, see `pipeline.distributed`); rank 0 writes every file.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from pathlib import Path

import datasets
import torch

from pipeline import checkpoint, distributed, tracking
from pipeline import device as dev
from pipeline.config import Params, load_params
from pipeline.data import SHA256, load_corpus
from pipeline.errors import run_main
from pipeline.evaluate import greedy_scorer
from pipeline.io import write_json
from pipeline.metrics import score as sacrebleu_score
from pipeline.model import Transformer
from pipeline.tokenizer import Tokenizer
from pipeline.train import Progress, Trainer, final_model, validation_loss

RUN_INFO = "mlflow_run.json"  # in CKPT_DIR: the MLflow run a resumed training continues


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


def data_checksums() -> dict[str, str]:
    """The SHA-256 of every raw corpus file, as pinned in `pipeline.data` and checked by the
    download stage (tags for the MLflow run)."""
    return {f"data.sha256.{name}": sha for name, sha in sorted(SHA256.items())}


def start_tracking(params: Params, out_dir: Path, fp: str, device: torch.device) -> tracking.Tracker:
    """The MLflow run of this training (NullTracker when disabled)."""
    if not params.mlflow.enabled:
        return tracking.NullTracker()
    tags = {
        "git_commit": tracking.git_commit(),
        "stage": "train",
        "device": str(device),
        "torch": torch.__version__,
        **data_checksums(),
    }
    flat = tracking.flatten(params.model_dump())
    return tracking.start_train_run(params.mlflow.experiment, out_dir / RUN_INFO, fp, flat, tags)


def main(out_dir: Path, log_csv: Path, summary_json: Path, run_id_file: Path) -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg = params.train
    if (cfg.dist.nproc_per_node > 1 or cfg.dist.nnodes > 1) and not distributed.under_torchrun():
        args = [str(a) for a in (out_dir, log_csv, summary_json, run_id_file)]
        status = distributed.relaunch(cfg.dist, "stages.train", args)
        if status:
            raise SystemExit(status)
        return
    corpus = load_corpus(params.download.out_dir)
    spm_path = Path(params.tokenizer.out_dir) / "spm.model"
    tok = Tokenizer.load(spm_path)
    device, bf16 = dev.setup(cfg.optim.device, cfg.optim.precision, cfg.optim.threads)
    world, device = distributed.init(device, cfg.optim.threads)
    try:
        train(params, tok, corpus, spm_path, device, bf16, world, out_dir, log_csv, summary_json, run_id_file)
    finally:
        distributed.close()


def train(
    params: Params,
    tok: Tokenizer,
    corpus: datasets.DatasetDict,
    spm_path: Path,
    device: torch.device,
    bf16: bool,
    world: distributed.World,
    out_dir: Path,
    log_csv: Path,
    summary_json: Path,
    run_id_file: Path,
) -> None:
    cfg = params.train
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
    fp = fingerprint(params, spm_path, len(train_pairs))
    tracker = start_tracking(params, out_dir, fp, device) if world.is_main else tracking.NullTracker()
    if world.is_main:
        print(f"train: {len(train_pairs)} pairs, {n_params} parameters, device {device}, bf16 {bf16}, "
              f"{world.size} process(es)")  # fmt: skip
    trainer = Trainer(
        model, train_pairs, validate, cfg.optim, out_dir, log_csv, tok.bos_id, tok.eos_id, "val_bleu",
        fp, meta={}, device=device, use_bf16=bf16, tracker=tracker, world=world,
    )  # fmt: skip
    try:
        progress = trainer.run()
        if world.is_main:
            finish(trainer, progress, validate, summary_json)
            tracking.write_run_id(run_id_file, tracker.run_id)
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish("FINISHED")


def finish(trainer: Trainer, progress: Progress, validate, summary_json: Path) -> None:
    """Choose and save the final model (on val), write the run's summary, track both."""
    out_dir, optim, tracker = trainer.out_dir, trainer.cfg, trainer.tracker
    state, choice = final_model(out_dir, progress.kept, validate, "val_bleu")
    checkpoint.save(out_dir / "model.pt", state)
    rows = progress.log
    write_json(
        summary_json,
        {
            "parameters": sum(p.numel() for p in trainer.model.parameters()),
            "train_pairs": len(trainer.pairs),
            "steps": progress.step,
            "epochs": progress.epoch,
            "wall_seconds": round(progress.wall_seconds, 1),
            "mean_tokens_per_s": round(sum(r["tokens_per_s"] for r in rows) / max(len(rows), 1), 1),
            "device": str(trainer.device),
            "bf16": trainer.use_bf16,
            "processes": trainer.world.size,
            "max_tokens_per_step": optim.max_tokens * optim.accum_steps * trainer.world.size,  # padded
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "cpu": platform.processor() or platform.machine(),
            "final_model": choice,
            "model": trainer.model.cfg.model_dump(),
            "optim": optim.model_dump(),
        },
    )
    tracker.log_metrics({"final_val_bleu_greedy": choice["val_bleu"]}, progress.step)
    tracker.log_artifact(out_dir / "model.pt", "model")
    tracker.log_artifact(summary_json, "reports")
    print(
        f"train: final model {choice['source']} val BLEU {choice['val_bleu']:.2f} -> {out_dir / 'model.pt'}"
    )


if __name__ == "__main__":
    run_main(lambda: main(*map(Path, sys.argv[1:5])))
