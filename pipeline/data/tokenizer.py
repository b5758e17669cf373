"""One joint SentencePiece model for EN and DE: training it, and encoding/decoding with it.

Special ids are fixed across the project: pad=0, unk=1, bos=2, eos=3. `encode` adds neither bos
nor eos; the model code adds them where needed. The placeholders of protected spans
(`pipeline.data.placeholders.PLACEHOLDERS`, ｟1｠..｟9｠) are user-defined symbols: one piece each (ids 4..12),
never split and left alone by SentencePiece's NFKC normalisation, so `decode(encode(x)) == x`.
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable
from pathlib import Path

import sentencepiece as spm

from pipeline.core.config import TokenizerConfig
from pipeline.core.errors import CheckpointError
from pipeline.core.io import atomic_path, write_text
from pipeline.data.placeholders import PLACEHOLDERS

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")  # indexed by the ids above
WORD_BOUNDARY = "\u2581"  # "▁": SentencePiece's space marker
MODEL_NAME = "spm"  # files: <out_dir>/spm.model and spm.vocab
SOURCE_WORDS = "source_words.txt"  # beside spm.model: the lower-cased English words of train
WORD_RE = re.compile(r"[^\W\d_]+(?:['’-][^\W\d_]+)*")  # a word: letters, inner ' or - (O'Brien)


def _trainer_options(cfg: TokenizerConfig) -> dict[str, object]:
    """SentencePiece trainer flags: the config's knobs, fixed special ids, reproducible runs."""
    pad, unk, bos, eos = SPECIAL_PIECES
    return {
        "model_type": cfg.model_type,
        "vocab_size": cfg.vocab_size,
        "character_coverage": cfg.character_coverage,
        "pad_id": PAD_ID,
        "unk_id": UNK_ID,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "pad_piece": pad,
        "unk_piece": unk,
        "bos_piece": bos,
        "eos_piece": eos,
        "user_defined_symbols": list(PLACEHOLDERS),
        "hard_vocab_limit": False,  # a small (smoke) corpus may not support vocab_size pieces
        "input_sentence_size": 0,  # use every sentence: no random sampling
        "shuffle_input_sentence": False,
        "num_threads": 1,  # byte-identical models whatever the thread scheduling (~6 s on Multi30k)
        "minloglevel": 2,  # warnings and errors only
    }


def model_file(out_dir: str | Path) -> Path:
    """The SentencePiece model file in a tokenizer folder (`tokenizer.out_dir`): `<out_dir>/spm.model`."""
    return Path(out_dir) / f"{MODEL_NAME}.model"


def model_sha256(model_path: str | Path) -> str:
    """The SHA-256 of a SentencePiece model's bytes (`spm.model`, or the one in a folder): the
    tokenizer's fingerprint that checkpoints record.

    Raises:
        CheckpointError: the file cannot be read.
    """
    path = Path(model_path)
    if path.is_dir():
        path = model_file(path)
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise CheckpointError(
            f"{path}: cannot read the SentencePiece model ({exc.strerror or exc})"
        ) from None


def train_tokenizer(sentences: Iterable[str], out_dir: str | Path, cfg: TokenizerConfig) -> Path:
    """Train a SentencePiece model on `sentences`; write `<out_dir>/spm.model` and `spm.vocab`.

    Training runs in memory (no temp paths end up inside the model, so the same corpus and config
    give a byte-identical model); each file is written atomically. Returns the path of `spm.model`.

    Raises:
        RuntimeError: SentencePiece rejects the corpus or the options (e.g. an empty corpus).
    """
    out_dir = Path(out_dir)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model, **_trainer_options(cfg)
    )
    model_path = model_file(out_dir)
    with atomic_path(model_path) as tmp:
        tmp.write_bytes(model.getvalue())
    write_text(out_dir / f"{MODEL_NAME}.vocab", _vocab_text(model.getvalue()))
    return model_path


def write_source_words(sentences: Iterable[str], out_dir: str | Path) -> Path:
    """Write the words of the English training `sentences` to `<out_dir>/source_words.txt`.

    Every word (`WORD_RE`), lower-cased, sorted, one per line. Translation protects capitalised words not
    in it as names (`pipeline.serving.spans`).

    Returns:
        The file's path.
    """
    words = sorted({w.lower() for s in sentences for w in WORD_RE.findall(s)})
    path = Path(out_dir) / SOURCE_WORDS
    write_text(path, "".join(f"{w}\n" for w in words))
    return path


def _vocab_text(model_proto: bytes) -> str:
    """The `.vocab` listing SentencePiece writes: one `piece<TAB>score` line per id."""
    sp = spm.SentencePieceProcessor(model_proto=model_proto)
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))


class Tokenizer:
    """A trained SentencePiece model: text ↔ piece ids; `source_words` are the lower-cased English
    training words when `source_words.txt` lies beside the model file, else None."""

    pad_id, unk_id, bos_id, eos_id = PAD_ID, UNK_ID, BOS_ID, EOS_ID

    def __init__(
        self, processor: spm.SentencePieceProcessor, source_words: frozenset[str] | None = None
    ) -> None:
        self.sp, self.source_words = processor, source_words
        self._skip = {PAD_ID, BOS_ID, EOS_ID}

    @classmethod
    def load(cls, model_path: str | Path) -> Tokenizer:
        """Load `spm.model` (or a folder holding it).

        Raises:
            CheckpointError: the file is missing, unreadable, or its special ids are not 0/1/2/3.
        """
        path = Path(model_path)
        if path.is_dir():
            path = model_file(path)
        if not path.is_file():
            raise CheckpointError(f"{path}: SentencePiece model not found (run the tokenizer stage)")
        try:
            sp = spm.SentencePieceProcessor(model_file=str(path))
        except (OSError, RuntimeError) as exc:
            raise CheckpointError(f"{path}: not a SentencePiece model ({exc})") from None
        ids = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise CheckpointError(f"{path}: special ids pad/unk/bos/eos are {ids}, expected (0, 1, 2, 3)")
        words = path.with_name(SOURCE_WORDS)
        return cls(sp, frozenset(words.read_text(encoding="utf-8").split()) if words.is_file() else None)

    @property
    def vocab_size(self) -> int:
        """Number of ids, specials included."""
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Text → piece ids, without bos/eos."""
        return self.sp.encode(text, out_type=int)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Many texts → piece ids each, without bos/eos."""
        return self.sp.encode(list(texts), out_type=int)

    def sample_batch(self, texts: list[str], alpha: float, seed: int) -> list[list[int]]:
        """Many texts → piece ids each (no bos/eos), every segmentation sampled from the unigram lattice.

        Kudo 2018, section 3: all candidates, probabilities smoothed by `alpha`. A sample that decodes to
        other text than the best segmentation (an unknown piece across a user-defined symbol) is replaced by
        the best. The same `seed` repeats the samples within one process only: SentencePiece's sampler
        gives other samples in another process.
        """
        spm.set_random_generator_seed(seed)
        sampled = self.sp.encode(
            list(texts), out_type=int, enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1
        )
        best = self.encode_batch(texts)
        return [s if self.decode(s) == self.decode(b) else b for s, b in zip(sampled, best, strict=True)]

    def decode(self, ids: Iterable[int]) -> str:
        """Piece ids → text; pad, bos and eos ids are dropped, unk shows as " ⁇ "."""
        return self.sp.decode([int(i) for i in ids if int(i) not in self._skip])

    def id_to_piece(self, ids: Iterable[int]) -> list[str]:
        """Piece ids → piece strings (e.g. `▁A`, `<pad>`)."""
        return [self.sp.id_to_piece(int(i)) for i in ids]

    def normalize(self, text: str) -> str:
        """The text as `decode(encode(text))` gives it back: SentencePiece's NFKC-based
        normalization with spaces collapsed and trimmed (e.g. a no-break space becomes a space)."""
        return self.sp.normalize(text).replace(WORD_BOUNDARY, " ").strip(" ")
