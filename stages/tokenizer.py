"""DVC stage `tokenizer`: one joint SentencePiece model on the train split's English and target
(`download.tgt_lang`) sentences.

Run from the repository root: `python -m stages.tokenizer`. Reads the corpus at `download.out_dir`
(Multi30k only: incoming pairs never reach the tokenizer, so new data keeps the vocabulary) and writes `<tokenizer.out_dir>/spm.model`, `spm.vocab` and `source_words.txt` (the English
training words, lower-cased: translation protects capitalised words not in it as names).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence

from datasets import DatasetDict

from pipeline.core.errors import run_main
from pipeline.core.io import remove_stale_temps
from pipeline.core.params_file import stage_params
from pipeline.core.signals import die_with_parent
from pipeline.data.multi30k import SRC_LANG, TRAIN_SPLIT, load_corpus
from pipeline.data.tokenizer import Tokenizer, train_tokenizer, write_source_words


def train_sentences(corpus: DatasetDict, tgt_lang: str = "de") -> Iterator[str]:
    """Every English then every target sentence of the train split (no eval data reaches the tokenizer)."""
    for lang in (SRC_LANG, tgt_lang):
        yield from corpus[TRAIN_SPLIT][lang]


def main(argv: Sequence[str] = ()) -> None:
    """Run the stage; `argv`: its `-S section.key=value` overrides (`stage_params`)."""
    """Train and save the tokenizer; prints its vocabulary size."""
    die_with_parent()  # DVC killed: SIGTERM ends this stage, not left running orphaned
    params = stage_params(argv)
    remove_stale_temps(params.tokenizer.out_dir)  # a killed run's; DVC keeps the folder (persist)
    corpus = load_corpus(params.download.out_dir)
    model_path = train_tokenizer(
        train_sentences(corpus, params.download.tgt_lang), params.tokenizer.out_dir, params.tokenizer
    )
    words = write_source_words(corpus[TRAIN_SPLIT][SRC_LANG], params.tokenizer.out_dir)
    print(f"tokenizer: wrote {model_path} ({Tokenizer.load(model_path).vocab_size} pieces) and {words}")


if __name__ == "__main__":
    run_main(lambda: main(sys.argv[1:]))
