"""DVC stage `train`: the Transformer on Multi30k train + incoming pairs (placeholders protected). Usage: `python -m stages.train` (paths: `train.*`).

Writes checkpoints and `model.pt` (`out_dir`), the validation log, metrics (numbers only), run facts and
the MLflow run id. Continues from `out_dir/last.pt` when the run's identity is unchanged (raise
`max_minutes` to train longer). With `train.init_from: champion` it starts from the weights of the
MLflow model's `champion` version (`pipeline.warm_start`) instead of a random initialisation. Above one
process (`train.dist`) it relaunches itself under torchrun.
"""

from __future__ import annotations

from pathlib import Path

import datasets

from pipeline import checkpoint, distributed, tracking
from pipeline import device as dev
from pipeline import train as training
from pipeline.config import load_params
from pipeline.data import load_corpus
from pipeline.errors import ConfigError, run_main
from pipeline.incoming import read_training_set
from pipeline.io import write_json
from pipeline.tokenizer import Tokenizer


def main() -> None:
    datasets.disable_progress_bars()
    params = load_params()
    cfg = params.train
    if distributed.wants_torchrun(cfg.dist):
        raise SystemExit(distributed.relaunch(cfg.dist, "stages.train", []))
    spm_model = Path(params.tokenizer.out_dir) / "spm.model"
    tok = Tokenizer.load(spm_model)
    corpus = load_corpus(params.download.out_dir)
    device, bf16 = dev.setup(cfg.optim.device, cfg.optim.precision, cfg.optim.threads)
    world, device = distributed.init(device, cfg.optim.threads)
    try:
        tgt = params.download.tgt_lang
        en, de = read_training_set(params.incoming.out_jsonl, tgt)
        pairs = training.encode_pairs(tok, en, de, cfg.max_len)
        val = corpus["val"][: cfg.val_max_sentences]  # {"en": [...], tgt: [...]}
        bleu = training.bleu_validation(tok, val, params.decode, cfg.optim.max_tokens, device, tgt)
        model = training.new_model(cfg.model, tok.vocab_size, tok.pad_id, cfg.optim.seed)
        init_from = initial_weights(params, model, spm_model, world.is_main)
        run = training.RunContext(Path(cfg.out_dir), Path(cfg.log_csv), training.data_id(pairs), world,
                                  device=device, bf16=bf16, init_from=init_from)  # fmt: skip
        if world.is_main and params.mlflow.enabled:
            fingerprint = checkpoint.fingerprint(training.run_identity(model, cfg.optim, run))
            run.tracker = tracking.start_train_run(params, run.out_dir, fingerprint, device)
            if init_from:
                run.tracker.log_params({f"train.init_from_{k}": v for k, v in init_from.items()})
        with tracking.finishing(run.tracker):
            progress = training.train(model, pairs, bleu, cfg.optim, run)
            if world.is_main:
                metrics, facts = training.finish(model, progress, bleu, cfg, run)
                write_json(cfg.metrics_json, metrics)
                write_json(cfg.facts_json, facts | {"train_pairs": len(pairs)})
                for path in (cfg.metrics_json, cfg.facts_json):
                    run.tracker.log_artifact(Path(path), "reports")
                tracking.write_run_id(Path(cfg.run_id_file), run.tracker.run_id)
                start = f"champion v{init_from['version']}" if init_from else "scratch"
                print(f"train: {metrics['steps']} steps in {metrics['minutes']} minutes, from {start}")
    finally:
        distributed.close()


def initial_weights(params, model, spm_model: Path, verbose: bool) -> dict | None:
    """`train.init_from: champion`: load the champion's weights into `model` and return where they
    came from ({"alias", "version", "run_id"}); None (from scratch) leaves the fresh initialisation.

    Raises:
        ConfigError: init_from is set while MLflow is disabled (the champion lives in its registry).
        CheckpointError: no champion, or another architecture or tokenizer (`pipeline.warm_start`).
    """
    if params.train.init_from is None:
        return None
    if not params.mlflow.enabled:
        raise ConfigError("params.yaml: train.init_from: champion needs mlflow.enabled: true")
    from pipeline.warm_start import warm_start  # imports mlflow: only when warm-starting

    source = warm_start(model, params.mlflow.model_name, spm_model)
    if verbose:
        print(f"train: warm start from champion v{source['version']} of {params.mlflow.model_name!r} "
              f"(run {source['run_id']}): fine-tuning its weights, not a fresh initialisation")  # fmt: skip
    return source


if __name__ == "__main__":
    run_main(main)
