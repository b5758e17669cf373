"""DVC stage `warmup_train`: our Transformer on number-to-words, gated on test exact match.

Usage: `python -m stages.warmup_train` (paths: `warmup_train.*` in params.yaml). Writes the checkpoints,
the per-validation log, the metrics (`metrics_json`: exact_match, steps, minutes) and the facts
(`facts_json`: threshold, `stopped_by`, final-model choice); exits 1 when the test exact match is below
`warmup_train.threshold`. Budget: `max_steps` (or `patience`); `max_minutes` is only a safety cap.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import datasets

from pipeline.core import device as dev
from pipeline.core.errors import PipelineError, run_main
from pipeline.core.io import write_json
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data.corpus import TokenizedCorpus
from pipeline.data.multi30k import load_corpus
from pipeline.data.warmup import WarmupVocab, encode
from pipeline.training import checkpoint
from pipeline.training.final_model import choose, stopped_by, summary
from pipeline.training.loop import RunContext, new_model, start, train
from pipeline.training.validation import Validation, exact_match


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    datasets.disable_progress_bars()
    params = stage_params(argv)
    cfg, data, vocab = params.warmup_train, load_corpus(params.warmup_data.out_dir), WarmupVocab()
    device, bf16 = dev.setup(cfg.optim.device, cfg.optim.precision, cfg.optim.threads)
    val, test = (  # loss, and the exact match of greedy outputs
        Validation(
            encode(data[s], vocab),
            list(data[s]["tgt"]),
            vocab.decode,
            "val_exact_match",
            exact_match,
            params.decode,
            cfg.optim.max_tokens,
            device,
        )
        for s in ("val", "test")
    )
    pairs = TokenizedCorpus.from_pairs(encode(data["train"], vocab))
    run = RunContext(Path(cfg.out_dir), Path(cfg.log_csv), pairs.digest(), device=device, bf16=bf16)
    model = new_model(cfg.model, vocab.vocab_size, vocab.pad_id, cfg.optim.seed)
    with checkpoint.trainer_lock(run.out_dir):
        progress = train(model, pairs, val, start(model, cfg.optim, run))
    weights, choice = choose(run.out_dir, progress.kept, cfg.optim.average_last, val.score)
    test_match = test.score(checkpoint.build_model(weights))
    s = summary(progress)
    write_json(cfg.metrics_json, {"exact_match": test_match, "steps": s["steps"], "minutes": s["minutes"]})
    stop = stopped_by(progress, cfg.optim)
    write_json(cfg.facts_json, {"threshold": cfg.threshold, "stopped_by": stop, "final_model": choice})
    print(
        f"warmup_train: {s['steps']} steps, ended by {stop}; test exact match {test_match:.4f} "
        f"(threshold {cfg.threshold})"
    )
    if test_match < cfg.threshold:
        raise PipelineError(f"warmup gate failed: test exact match {test_match:.4f} < {cfg.threshold}")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
