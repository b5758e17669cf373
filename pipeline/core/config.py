"""Validated configuration: one pydantic model per `params.yaml` section, types and ranges only.

Every value, defaults included, is written in `params.yaml`; `pipeline.core.params_file` reads it,
and a missing, wrong-typed, out-of-range or unknown key is a one-line `ConfigError`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

N_SPECIAL_TOKENS = 4  # pad, unk, bos, eos: see pipeline.data.tokenizer
# decode.beam_size at most: wider beams only cost time (Koehn & Knowles 2017: BLEU falls beyond ~30)
MAX_BEAM_SIZE = 100
MAX_SEED = 2**32 - 1  # numpy's and SentencePiece's seeds are unsigned 32-bit
MAX_VOCAB = 65_536  # `prepare` stores piece ids as uint16


class Section(BaseModel):
    """Base for every section: unknown keys are errors, values are immutable, numbers are finite,
    and a boolean is not a number (YAML's `true` would otherwise pass as 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    OUTPUTS: ClassVar[tuple[str, ...]] = ()  # the fields naming files or folders the stages write

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            kind = _number_kind(cls.model_fields[info.field_name].annotation)
            if kind:
                raise ValueError(f"Input should be a valid {kind}, not a boolean")
        return value


def _number_kind(annotation: Any) -> str | None:
    """The kind of an int or float field ("integer", "number"; `int | None` too), else None."""
    types = set(get_args(annotation)) or {annotation}
    if bool in types:
        return None
    if int in types:
        return "integer"
    return "number" if float in types else None


S = TypeVar("S", bound=Section)


class DownloadConfig(Section):
    """Stage `download`: where Multi30k lives and how much of it the DAG uses."""

    OUTPUTS: ClassVar[tuple[str, ...]] = ("out_dir",)
    out_dir: str
    mirror: str | None  # env MULTI30K_MIRROR wins over this
    max_train_pairs: int | None = Field(gt=0, le=10**9)  # smoke runs: first N pairs
    max_eval_pairs: int | None = Field(gt=0, le=10**9)
    tgt_lang: Literal["de", "fr", "cs"]  # target language (cs has no test_2017_flickr)


class TokenizerConfig(Section):
    """Stage `tokenizer`: one joint SentencePiece model over train EN+DE."""

    OUTPUTS: ClassVar[tuple[str, ...]] = ("out_dir",)
    model_type: Literal["unigram", "bpe"]
    vocab_size: int = Field(gt=N_SPECIAL_TOKENS, le=MAX_VOCAB)
    character_coverage: float = Field(gt=0.0, le=1.0)
    out_dir: str


class WarmupDataConfig(Section):
    """Stage `warmup_data`: the number-to-words task, split by number."""

    OUTPUTS: ClassVar[tuple[str, ...]] = ("out_dir",)
    out_dir: str
    max_number: int = Field(ge=10, le=999_999)
    n_train: int = Field(gt=0, le=1_000_000)
    n_val: int = Field(gt=0, le=1_000_000)
    n_test: int = Field(gt=0, le=1_000_000)
    seed: int = Field(ge=0, le=MAX_SEED)

    @model_validator(mode="after")
    def _fits(self) -> WarmupDataConfig:
        if self.n_train + self.n_val + self.n_test > self.max_number + 1:
            raise ValueError("n_train + n_val + n_test exceeds the count of numbers 0..max_number")
        return self


class ModelConfig(Section):
    """Transformer sizes (Vaswani et al. 2017, Table 3 names)."""

    d_model: int = Field(gt=0, le=16_384)
    n_heads: int = Field(gt=0, le=1024)
    n_layers: int = Field(gt=0, le=128)
    d_ff: int = Field(gt=0, le=65_536)
    dropout: float = Field(ge=0.0, lt=1.0)
    attn_dropout: float = Field(ge=0.0, lt=1.0)  # on the attention weights
    act_dropout: float | None = Field(ge=0.0, lt=1.0)  # after the FFN's ReLU; None: `dropout`
    pre_norm: bool
    tie_embeddings: bool

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        return self


class OptimConfig(Section):
    """Optimisation knobs shared by `warmup_train` and `train`.

    `TRAJECTORY` names the fields a training's trajectory depends on (part of its fingerprint);
    the others are budgets and bookkeeping that may change between a run and its continuation.
    """

    seed: int = Field(ge=0, le=MAX_SEED)
    max_tokens: int = Field(gt=0, le=10_000_000)  # padded tokens of the larger side per batch
    accum_steps: int = Field(gt=0, le=10_000)
    peak_lr: float = Field(gt=0.0, le=1.0)
    schedule: Literal["inverse_sqrt", "linear", "cosine"]  # pipeline.training.schedule
    warmup_steps: int = Field(gt=0, le=100_000_000)
    label_smoothing: float = Field(ge=0.0, lt=1.0)
    rdrop_alpha: float = Field(ge=0.0, le=100.0)  # R-Drop's KL weight (pipeline.training.rdrop); 0: off
    clip_norm: float = Field(gt=0.0, le=1e6)
    max_steps: int = Field(gt=0, le=100_000_000)  # the budget: the same run on every machine
    max_minutes: float = Field(gt=0.0, le=60 * 24 * 365)  # a safety cap (wall clock, validation included)
    val_every: int = Field(gt=0, le=100_000_000)
    patience: int = Field(gt=0, le=1_000_000)  # validations without improvement
    average_last: int = Field(gt=0, le=1000)  # step checkpoints kept for the final average
    ema_decay: float | None = Field(gt=0.0, lt=1.0)  # weight average candidate; None: off
    device: Literal["auto", "cpu", "cuda"]
    precision: Literal["auto", "fp32", "bf16"]
    threads: int | None = Field(gt=0, le=4096)

    TRAJECTORY: ClassVar[tuple[str, ...]] = (
        "seed",
        "max_tokens",
        "accum_steps",
        "peak_lr",
        "schedule",
        "warmup_steps",
        "label_smoothing",
        "clip_norm",
    )


class WarmupTrainConfig(Section):
    """Stage `warmup_train`: a small model on number-to-words, gated on exact match."""

    OUTPUTS: ClassVar[tuple[str, ...]] = ("out_dir", "log_csv", "metrics_json", "facts_json")
    out_dir: str  # checkpoints
    log_csv: str
    metrics_json: str  # numbers: exact_match (test split), steps, minutes
    facts_json: str  # the gate's threshold, the final-model choice
    threshold: float = Field(ge=0.0, le=1.0)
    model: ModelConfig
    optim: OptimConfig


class DistConfig(Section):
    """Stage `train` under `torchrun` (DistributedDataParallel). 1 × 1 = one plain process."""

    nproc_per_node: int = Field(gt=0, le=1024)  # processes (GPUs) per machine
    nnodes: int = Field(gt=0, le=100_000)  # machines; > 1 needs master_addr (each sets env NODE_RANK)
    master_addr: str | None  # host name or address of node 0, multi-node only
    master_port: int = Field(gt=0, lt=65536)

    @model_validator(mode="after")
    def _address_for_nodes(self) -> DistConfig:
        if self.nnodes > 1 and not self.master_addr:
            raise ValueError("nnodes > 1 needs master_addr (the address of node 0)")
        return self


class TrainConfig(Section):
    """Stage `train`: the Transformer on Multi30k."""

    OUTPUTS: ClassVar[tuple[str, ...]] = (
        "out_dir",
        "model_file",
        "log_csv",
        "metrics_json",
        "facts_json",
        "run_id_file",
    )
    out_dir: str  # checkpoints (`last.pt` continues a run)
    model_file: str  # the final model the later stages read: in out_dir
    log_csv: str  # one row per validation
    metrics_json: str  # numbers people compare (DVC metrics)
    facts_json: str  # device, versions, final-model choice
    run_id_file: str  # the MLflow run decode/score add to
    max_len: int = Field(gt=0, le=100_000)  # pieces; longer training pairs are skipped
    val_max_sentences: int | None = Field(gt=0, le=10**9)  # cap greedy-BLEU cost
    model: ModelConfig
    optim: OptimConfig
    dist: DistConfig
    init_from: Literal["champion"] | None  # None: from scratch; the registered champion's weights

    @model_validator(mode="after")
    def _model_in_out_dir(self) -> TrainConfig:
        if Path(self.model_file).parent != Path(self.out_dir):
            raise ValueError(f"model_file {self.model_file} is not directly in out_dir {self.out_dir}")
        return self

    @model_validator(mode="after")
    def _batch_holds_a_pair(self) -> TrainConfig:
        longest = self.max_len + 1  # pieces plus BOS or EOS
        if self.optim.max_tokens < longest:
            raise ValueError(
                f"optim.max_tokens={self.optim.max_tokens} is below the longest pair a batch must "
                f"hold (max_len + 1 = {longest} tokens)"
            )
        return self


class MlflowConfig(Section):
    """MLflow tracking of `train`, `decode` and `score` (URI: env MLFLOW_TRACKING_URI, else
    `sqlite:///<repository root>/mlflow.db`)."""

    enabled: bool
    experiment: str
    model_name: str  # registered model of the final translators
    log_checkpoints: Literal["all", "best_and_last", "none"]  # checkpoints uploaded (model.pt always)


class SearchConfig(Section):
    """Beam search (Wu et al. 2016 length penalty): what every decoder takes and the served model logs."""

    beam_size: int = Field(gt=0, le=MAX_BEAM_SIZE)
    length_penalty: float = Field(ge=0.0, le=10.0)  # GNMT alpha: 0 (none) to 2 in practice
    max_len_a: float = Field(ge=0.0, le=10.0)  # max target pieces = a * src_len + b
    max_len_b: int = Field(ge=1, le=10_000)
    batch_size: int = Field(gt=0, le=100_000)  # sentences per batch


class DecodeConfig(SearchConfig):
    """Stage `decode`: the search settings (`SearchConfig`), its files and the ensemble."""

    PATHS: ClassVar[tuple[str, ...]] = (
        "time_machine_tsv",
        "robustness_tsv",
        "translations_dir",
        "time_machine_md",
        "robustness_json",
        "robustness_failures_json",
    )
    OUTPUTS: ClassVar[tuple[str, ...]] = PATHS[2:]  # the two TSV files are inputs

    time_machine_tsv: str  # the tutorial's 20 sentences and its German
    robustness_tsv: str  # inputs and the properties their output must keep
    translations_dir: str  # <split>.hyp.<tgt_lang>, one line per sentence
    time_machine_md: str  # the tutorial's outputs beside ours
    robustness_json: str  # numbers: passed, total, upper-cased BLEU
    robustness_failures_json: str  # the inputs that failed
    ensemble: tuple[str, ...]  # more checkpoints decoded with train.model_file (same tokenizer)

    def settings(self) -> dict:
        """The search settings alone (no paths, no models): what a decoder and the served model take."""
        return self.model_dump(include=set(SearchConfig.model_fields))

    def search(self) -> SearchConfig:
        """The search settings as a `SearchConfig`."""
        return SearchConfig(**self.settings())


class ScoreConfig(Section):
    """Stage `score`: sacreBLEU of `decode`'s translations."""

    OUTPUTS: ClassVar[tuple[str, ...]] = ("scores_dir", "facts_json")
    scores_dir: str  # <split>.json: numbers only (DVC metrics)
    facts_json: str  # the sacreBLEU signatures


class ReportConfig(Section):
    """Stage `report`: the results page and its figures."""

    OUTPUTS: ClassVar[tuple[str, ...]] = ("page_md", "figures_dir", "plots_template")
    page_md: str
    figures_dir: str
    plots_template: str  # `dvc plots show`'s page (.dvc/config)


class ServeConfig(Section):
    """The served MLflow model's request limits (logged with it by `decode`): a request beyond
    them is answered with a 400 at once, before any translation."""

    max_inputs: int = Field(gt=0, le=1_000_000)  # strings per request
    max_chars: int = Field(gt=0, le=10_000_000)  # characters per string
    max_seconds: float = Field(gt=0.0, le=86_400.0)  # a request stops past it (MLflow's own -t: 60 s)
    max_body_bytes: int = Field(gt=0, le=2**31)  # a larger request body: 413, not read to its end


class IncomingConfig(Section):
    """Stage `incoming`: user-supplied `en<TAB>de` files merged with Multi30k train."""

    OUTPUTS: ClassVar[tuple[str, ...]] = ("out_jsonl", "metrics_json")
    in_dir: str  # *.tsv files users drop in
    out_jsonl: str  # the training set the train stage reads
    metrics_json: str  # counts: read, dropped (leak, duplicate), added


class DistillConfig(Section):
    """Stage `distill`: sequence-level knowledge distillation (Kim & Rush 2016, section 3.1).

    With `teacher` empty the merged set passes through unchanged; otherwise the teacher checkpoints
    translate its English side with the `decode` settings, and those translations are training
    targets (after the original pairs with `keep_original`). `combine`: `ensemble` decodes the
    teachers together (log-probabilities averaged), one translation per source; `each` adds every
    teacher's own translation (the forward half of data diversification, Nguyen et al. 2020).
    """

    OUTPUTS: ClassVar[tuple[str, ...]] = ("out_jsonl", "facts_json")
    teacher: tuple[str, ...]  # checkpoint paths in the checkout (each a DVC dependency); () = off
    combine: Literal["ensemble", "each"]
    keep_original: bool  # train on the original pairs and the teachers', or the teachers' alone
    out_jsonl: str  # what `prepare` reads
    facts_json: str  # the teachers' files and SHA-256, pair counts, minutes


class PrepareConfig(Section):
    """Stage `prepare`: the merged training set tokenized once, memory-mapped (`pipeline.data.corpus`)."""

    OUTPUTS: ClassVar[tuple[str, ...]] = ("out_dir",)
    out_dir: str
    # Subword sampling (Kudo 2018, section 3): each pair written `sampling_copies` times, each
    # copy both sides segmented by a sample from the unigram model's lattice at smoothing
    # `sampling_alpha` (smaller: more varied); None = off, one best segmentation per pair.
    sampling_alpha: float | None = Field(gt=0.0, le=1.0)  # BPE-dropout reads it as a probability
    sampling_copies: int = Field(ge=1, le=1_000_000)  # the disk-space check is the real limit
    sampling_seed: int = Field(ge=0, le=MAX_SEED)  # SentencePiece's sampler (repeats within a process)


class PromotionConfig(Section):
    """The flow's promotion: sacreBLEU paired bootstrap of val BLEU, candidate vs champion."""

    p_threshold: float = Field(gt=0.0, lt=1.0)  # promote only when p is below it
    n_samples: int = Field(gt=0, le=10_000_000)  # bootstrap resamples


class Params(Section):
    """The whole `params.yaml`."""

    download: DownloadConfig
    incoming: IncomingConfig
    tokenizer: TokenizerConfig
    distill: DistillConfig
    prepare: PrepareConfig
    warmup_data: WarmupDataConfig
    warmup_train: WarmupTrainConfig
    train: TrainConfig
    decode: DecodeConfig
    score: ScoreConfig
    report: ReportConfig
    serve: ServeConfig
    mlflow: MlflowConfig
    promotion: PromotionConfig
