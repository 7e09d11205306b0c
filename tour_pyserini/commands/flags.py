"""Flag helpers every command shares: the parser, numeric flag types, and old names kept for one release.

Every command builds its parser with :class:`ArgumentParser`. Its errors are one line (``error: ...``,
exit status 2), and a numeric flag typed with a :class:`Number` (``positive_int``, ``fraction``, ...) is
checked as it is parsed: nan, inf or a value out of range is a :class:`UserError` naming the flag, raised
before the command does any work.
"""

from __future__ import annotations

import argparse
import logging

from tour_pyserini._java import show_java_warnings
from tour_pyserini.devices import DEFAULT_PRECISION, PRECISIONS, resolve_precision
from tour_pyserini.encoders.spec import DOCUMENT_LENGTH
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Number, Param, configure, params_of, positive_int
from tour_pyserini.runtime import AUTO, ONNX_AUTO, RUNTIME_CHOICES, RUNTIME_PRECISIONS

log = logging.getLogger(__name__)


class ArgumentParser(argparse.ArgumentParser):
    """argparse with one-line errors and :class:`Number` flags checked at parse time (subcommands' too:
    they are parsers of this class), and ``--verbose`` on every command."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_argument(
            "--verbose",
            action="store_true",
            help="also show the JVM's and Lucene's own warnings (kept off the terminal by default)",
        )

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if getattr(namespace, "verbose", False):
            show_java_warnings()
        for action in self._actions:
            if isinstance(action.type, Number):
                values = getattr(namespace, action.dest, None)
                for value in values if isinstance(values, list) else [values]:
                    if value is not None:
                        action.type.check(action.option_strings[0], value)
        return namespace, extras

    def error(self, message: str):
        # the usage of a command with many flags runs to twenty lines and buries the one that matters
        self.exit(2, f"error: {message} ({self.prog} --help lists the flags)\n")


def add_param_flags(ap, config_class) -> None:
    """A flag for each parameter the dataclass ``config_class`` declares with :func:`~tour_pyserini.numbers.param`
    (its help says the default; its range is checked as it is parsed); each stays None when not given."""
    for p in params_of(config_class):
        add_param(ap, p)


def add_param(ap, p: Param) -> None:
    """The flag of ``p`` on a parser or group; it stays None when not given, so the default applies. Each of its
    old names (``p.aliases``) is the same flag, hidden from the help, and warns when given."""
    kind = (
        {"action": "store_const", "const": p.const}
        if p.const is not None
        else {"type": p.type, "choices": p.choices, "metavar": p.metavar}
    )
    ap.add_argument(p.option, dest=p.dest, help=p.described, **kind)
    for alias in p.aliases:
        ap.add_argument(
            alias,
            dest=p.dest,
            help=argparse.SUPPRESS,
            action=OldName,
            new=p.option,
            **({"nargs": 0, "const": p.const} if p.const is not None else kind),
        )


class OldName(argparse.Action):
    """A flag's old name: stores the value as the new flag does, with one warning that the name is old."""

    def __init__(self, *args, new: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        log.warning(
            "%s is the old name of %s (same meaning); it will be removed in the next release", option_string, self.new
        )
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


class CollectionName(argparse.Action):
    """``--collection``: a directory (or a corpus file), or the name of a collection the registry finds
    (:mod:`tour_pyserini.files.collections`), stored as the directory it names. A value that is neither is kept as
    given: the command says so where it reads the collection, after every flag's own value is checked."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        from tour_pyserini.files.collections import UnknownCollection, collection_directory

        try:
            value = str(collection_directory(value))
        except UnknownCollection:
            pass
        except UserError as e:  # a known name whose declaration is wrong
            parser.error(f"{option_string} {e}")
        setattr(namespace, self.dest, value)


def config_from_flags(config_class, args: argparse.Namespace, **values):
    """``config_class`` from the flags :func:`add_param_flags` added and ``values`` (fields with flags of their own,
    e.g. precision), checked once; a value not given (None) keeps its default."""
    return configure(config_class, {**{p.name: getattr(args, p.dest) for p in params_of(config_class)}, **values})


# the flags of a teacher model (--teacher names the teacher; each command says what for)
TEACHER = Param("teacher", metavar="TEACHER", aliases=("--reranker",))
TEACHER_MAX_LENGTH = Param(
    "teacher_max_length",
    positive_int,
    "tokens a cross-encoder teacher reads (default: the model's own limit, which the trainer sets to its "
    "training length; at most 512)",
    aliases=("--reranker-max-length",),
)
TEACHER_PRECISION = Param(
    "teacher_precision",
    choices=RUNTIME_PRECISIONS,
    help="a cross-encoder teacher's arithmetic: bf16 (bfloat16 encoder, float32 head; about 2x faster on CPUs with "
    "AVX512-BF16 or AMX; refused where torch has no native bfloat16 kernels), fp32, int8 (--teacher-runtime onnx: "
    "8-bit weights), or auto (torch and openvino: bf16 where the CPU multiplies in bfloat16 natively, else fp32; "
    f"onnx: {ONNX_AUTO} where the CPU has VNNI, else fp32; default {DEFAULT_PRECISION})",
    aliases=("--reranker-precision",),
)


def add_teacher_flags(ap) -> None:
    """The flags of a teacher model, ``--teacher-max-length`` and ``--teacher-precision``, and those the teachers
    declare (``--teacher-model``, ``--teacher-runtime``, ...), on ``ap`` or a group."""
    from tour_pyserini.teachers import teacher_options

    add_param(ap, TEACHER_MAX_LENGTH)
    add_param(ap, TEACHER_PRECISION)
    for option in teacher_options():
        add_param(ap, option)


def teacher_flags(args: argparse.Namespace) -> dict:
    """The teacher options given, by parameter (the search's plan checks that its teachers read them)."""
    from tour_pyserini.teachers import teacher_options

    return {o.name: getattr(args, o.dest) for o in teacher_options() if getattr(args, o.dest, None) is not None}


def add_trainer_flags(ap: argparse.ArgumentParser, config_class) -> None:
    """A trainer's ``--precision`` and a flag for each parameter its config dataclass declares;
    :func:`trainer_config` reads them back."""
    ap.add_argument(
        "--precision",
        choices=PRECISIONS,
        help="arithmetic of the forward passes: bf16 (bfloat16 "
        "autocast, about twice as fast on CPUs with bfloat16 units, less exact; refused where torch "
        "has no native bfloat16 kernels), fp32, or auto (bf16 where torch has them) "
        f"(default: {config_class.precision})",
    )
    add_param_flags(ap, config_class)


def trainer_config(ap: argparse.ArgumentParser, argv: list[str] | None, config_class):
    """The parsed flags of a trainer and its config, checked once; a precision torch cannot run here is refused
    now, before any model loads."""
    args = ap.parse_args(argv)
    config = config_from_flags(config_class, args, precision=args.precision)
    resolve_precision(config.precision, "cpu", "--precision")
    return args, config


def add_encoder_flags(ap: argparse.ArgumentParser, side: str) -> None:
    """The encoder flags of ``python -m pyserini.search.faiss`` (``side`` "query") or ``python -m
    pyserini.encode`` (``side`` "document"), with Pyserini's meanings; each stays None when not given, so
    the index's record or the model's own config fills it."""
    from tour_pyserini.encoders.classes import DOCUMENT_CHOICES, QUERY_CHOICES, get_class

    def encoder_class(name: str) -> str:
        try:
            return get_class(name).name
        except UserError as e:  # unknown or multimodal: argparse's one line, before anything loads
            raise argparse.ArgumentTypeError(str(e).removeprefix("--encoder-class ")) from None

    query = side == "query"
    choices = QUERY_CHOICES if query else DOCUMENT_CHOICES
    group = ap.add_argument_group(
        f"{side} encoder (dense only; flags as in {'pyserini.search.faiss' if query else 'pyserini.encode'})"
    )
    group.add_argument(
        "--encoder-class",
        type=encoder_class,
        metavar="CLASS",
        help=f"Pyserini's encoder class: {', '.join(choices)}; default: inferred as Pyserini infers "
        "it (a class name in the encoder's name, else auto)" + (", or the index's own" if query else ""),
    )
    group.add_argument(
        "--pooling",
        choices=["cls", "mean", "last", "eos"],
        help="auto class: pooling (default: the model's sentence-transformers config, else cls)",
    )
    group.add_argument(
        "--l2-norm",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="auto and qwen3 classes: normalise the vectors (default: the model's config, else no)",
    )
    group.add_argument(
        "--query-prefix",
        metavar="TEXT",
        help="text put before each query (auto: with a space, "
        "qwen3 and st-pipeline: as is), e.g. E5's 'query:' or BGE's instruction"
        + ("" if query else "; recorded in the index for its searches"),
    )
    if query:
        group.add_argument("--tokenizer", metavar="NAME_OR_DIR", help="tokenizer, if not the encoder's own")
        group.add_argument(
            "--max-length", type=positive_int, help="qwen3 and openai-api: query tokens (Pyserini's default 256)"
        )
        add_encoder_runtime_flags(group)
        group.add_argument(
            "--encoded-queries",
            metavar="DIR",
            help="pre-encoded queries in Pyserini's format (embedding.pkl) instead of an encoder",
        )
    else:
        group.add_argument(
            "--doc-prefix",
            "--prefix",
            dest="doc_prefix",
            metavar="TEXT",
            help="text put before each document (auto, qwen3, st-pipeline), e.g. E5's 'passage:'",
        )
        group.add_argument(
            "--max-length",
            type=positive_int,
            help="document tokens (default: the model's "
            f"sentence-transformers config, else {DOCUMENT_LENGTH}, pyserini.encode's)",
        )


def add_encoder_runtime_flags(group) -> None:
    """``--encoder-precision`` and ``--encoder-runtime``: how the query encoder runs (search and serve)."""
    group.add_argument(
        "--encoder-precision",
        choices=RUNTIME_PRECISIONS,
        help="the query encoder's arithmetic: bf16 (torch: bfloat16 autocast, openvino: its "
        "bfloat16 inference; about 2x faster on CPUs with AVX512-BF16 or AMX, vectors within "
        "about 1.5e-3 of fp32), int8 (onnx: 8-bit weights), fp32, or auto (default: fp32 through "
        "every runtime, since bf16 and int8 reorder near-tied documents; docs/algorithms.md)",
    )
    group.add_argument(
        "--encoder-runtime",
        choices=RUNTIME_CHOICES,
        default=AUTO,
        help="what runs the query encoder: auto (default: openvino where it can, else torch), torch, "
        "onnx (ONNX Runtime on the CPU: the model exported once, fused, cached beside its weights) "
        "or openvino (OpenVINO on the CPU, the same export unfused: fp32 1.1-2.1x torch's speed, "
        "vectors within 3e-7 of torch's); onnx and openvino run the auto, sentence and contriever "
        "classes from a local directory and need the runtime extra, which auto uses where "
        "installed",
    )


def encoder_settings(args: argparse.Namespace):
    """The encoder flags :func:`add_encoder_flags` added, as the library takes them."""
    from tour_pyserini.encoders import EncoderSettings

    return EncoderSettings(
        encoder_class=args.encoder_class,
        pooling=args.pooling,
        l2_norm=args.l2_norm,
        max_length=args.max_length,
        query_prefix=args.query_prefix,
        doc_prefix=getattr(args, "doc_prefix", None),
        tokenizer=getattr(args, "tokenizer", None),
    )
