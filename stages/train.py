"""DVC stage `train`: the Transformer on Multi30k train + incoming pairs. Usage: `python -m stages.train`.

Reads the pairs the `prepare` stage tokenized (`prepare.out_dir`, memory-mapped) and Multi30k val. Writes
`model.pt` and checkpoints, the validation log, metrics, facts and the MLflow run id (`train.*`); continues
from `last.pt` when the run's identity is unchanged; `train.init_from: champion` starts from the champion's
weights (`pipeline.training.warm_start`); above one process it relaunches itself under torchrun.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

import datasets

from pipeline.core import device as dev
from pipeline.core.errors import run_main
from pipeline.core.io import write_json
from pipeline.core.params_file import stage_params
from pipeline.core.run_id import write_run_id
from pipeline.core.signals import die_with_parent
from pipeline.data.corpus import TokenizedCorpus
from pipeline.data.multi30k import load_corpus
from pipeline.data.tokenizer import Tokenizer, model_file, model_sha256
from pipeline.tracking import store, train_run
from pipeline.tracking.tracker import finishing
from pipeline.training import checkpoint, distributed, final_model, loop, shadow, validation, warm_start


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    datasets.disable_progress_bars()
    params = stage_params(argv)
    cfg = params.train
    if distributed.wants_torchrun(cfg.dist):
        raise SystemExit(distributed.relaunch(cfg.dist, "stages.train", sys.argv[1:]))
    die_with_parent()  # DVC killed: SIGTERM, so the run saves last.pt and ends, not orphaned
    if params.mlflow.enabled:
        store.check_store()
    spm_model = model_file(params.tokenizer.out_dir)
    tok = Tokenizer.load(spm_model)
    device, bf16 = dev.setup(cfg.optim.device, cfg.optim.precision, cfg.optim.threads)
    world, device = distributed.init(device, cfg.optim.threads)
    lock = checkpoint.trainer_lock(Path(cfg.out_dir)) if world.is_main else contextlib.nullcontext()
    try:
        with lock:  # before the MLflow run: a second trainer stops at once
            tgt = params.download.tgt_lang
            val = load_corpus(params.download.out_dir)["val"][: cfg.val_max_sentences]  # {"en", tgt}: lists
            pairs = TokenizedCorpus.open(params.prepare.out_dir, model_sha256(spm_model), tok.vocab_size)
            bleu = validation.bleu_validation(
                tok, val, params.decode, max_tokens=cfg.optim.max_tokens, device=device, tgt=tgt
            )
            model = loop.new_model(cfg.model, tok.vocab_size, tok.pad_id, cfg.optim.seed)
            init_from = warm_start.initial_weights(params, model, spm_model, world.is_main)
            run = loop.RunContext(
                Path(cfg.out_dir),
                Path(cfg.log_csv),
                pairs.digest(),
                world,
                device=device,
                bf16=bf16,
                init_from=init_from,
                spm_sha256=model_sha256(spm_model),
            )
            state = loop.start(model, cfg.optim, run)  # the optimizer, the weight average, the identity
            if world.is_main and (step := shadow.restore(run.out_dir, state.fingerprint)) is not None:
                copy = shadow.shadow_dir(run.out_dir)
                print(f"{run.out_dir}: restored at step {step} from {copy} (DVC had reset the folder)")
            if world.is_main and params.mlflow.enabled:
                start = train_run.TrainStart(run.data_id, len(pairs), str(device), init_from)
                run.tracker = train_run.start_train_run(params, run.out_dir, state.fingerprint, start)
            with finishing(run.tracker):
                loop.train(model, pairs, bleu, state)
                if world.is_main:
                    metrics, facts = final_model.save_final_model(model, state, bleu, cfg)
                    facts["train_pairs"] = len(pairs)
                    for path, content in ((cfg.metrics_json, metrics), (cfg.facts_json, facts)):
                        write_json(path, content)
                        run.tracker.log_artifact(Path(path), "reports")
                    write_run_id(Path(cfg.run_id_file), run.tracker.run_id)
    finally:
        distributed.close()


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
