"""DVC stage `train`: the Transformer on Multi30k train + incoming pairs (placeholders protected). Usage: `python -m stages.train` (paths: `train.*`).

Writes checkpoints and `model.pt` (`out_dir`), the validation log, metrics (numbers only), run facts and
the MLflow run id. Continues from `out_dir/last.pt` when the run's identity is unchanged (raise
`max_minutes` to train longer). Above one process (`train.dist`) it relaunches itself under torchrun.
"""

from __future__ import annotations

from pathlib import Path

import datasets

from pipeline import checkpoint, distributed, tracking
from pipeline import device as dev
from pipeline import train as training
from pipeline.config import load_params
from pipeline.data import load_corpus
from pipeline.errors import run_main
from pipeline.incoming import read_training_set
from pipeline.io import write_json
from pipeline.tokenizer import Tokenizer


def main() -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg = params.train
    if distributed.wants_torchrun(cfg.dist):
        raise SystemExit(distributed.relaunch(cfg.dist, "stages.train", []))
    tok = Tokenizer.load(Path(params.tokenizer.out_dir) / "spm.model")
    corpus = load_corpus(params.download.out_dir)
    device, bf16 = dev.setup(cfg.optim.device, cfg.optim.precision, cfg.optim.threads)
    world, device = distributed.init(device, cfg.optim.threads)
    try:
        en, de = read_training_set(params.incoming.out_jsonl)
        pairs = training.encode_pairs(tok, en, de, cfg.max_len)
        val = corpus["val"][: cfg.val_max_sentences]  # {"en": [...], "de": [...]}
        bleu = training.bleu_validation(tok, val, params.decode, cfg.optim.max_tokens, device)
        model = training.new_model(cfg.model, tok.vocab_size, tok.pad_id, cfg.optim.seed)
        run = training.RunContext(
            Path(cfg.out_dir), Path(cfg.log_csv), training.data_id(pairs), world, device=device, bf16=bf16
        )
        if world.is_main and params.mlflow.enabled:
            fingerprint = checkpoint.fingerprint(training.run_identity(model, cfg.optim, run))
            run.tracker = tracking.start_train_run(params, run.out_dir, fingerprint, device)
        with tracking.finishing(run.tracker):
            progress = training.train(model, pairs, bleu, cfg.optim, run)
            if world.is_main:
                metrics, facts = training.finish(model, progress, bleu, cfg, run)
                write_json(cfg.metrics_json, metrics)
                write_json(cfg.facts_json, facts | {"train_pairs": len(pairs)})
                for path in (cfg.metrics_json, cfg.facts_json):
                    run.tracker.log_artifact(Path(path), "reports")
                tracking.write_run_id(Path(cfg.run_id_file), run.tracker.run_id)
    finally:
        distributed.close()


if __name__ == "__main__":
    run_main(main)
