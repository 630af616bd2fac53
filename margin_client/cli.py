"""The `margin` client commands: datasets, train, jobs, models, registry, runs, predict,
evaluate.

They talk to a running service (``--url`` or MARGIN_URL, default http://127.0.0.1:8000) with
``--api-key`` or MARGIN_API_KEY. Every command takes ``--json``: the result as JSON on stdout
and nothing else there (progress bars go to stderr, and only to a terminal). Exit status: 0 on
success, 1 on an error answer or a job that did not succeed, 130 when interrupted.

The commands are registered on the main `margin` parser by `add_commands` (app/cli.py); they
import nothing of the service's stack.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from margin_client import output, predict_io
from margin_client.cli_registry import add_registry

UPLOAD_FORMATS = ("libsvm", "csv", "tsv", "parquet", "npz")
COMMANDS = ("datasets", "train", "jobs", "models", "registry", "runs", "predict", "evaluate")
TRAIN_FLAGS = {  # flag -> (parameter, type, help); the defaults are the service's (LinearSVC's)
    "--C": ("C", float, "the loss term's weight (default 1; --search chooses it)"),
    "--loss": ("loss", str, "squared_hinge (default), hinge; squared_error; LinearSVR: "
               "epsilon_insensitive (default), squared_epsilon_insensitive"),
    "--multi-class": ("multi_class", str, "ovr (default), crammer_singer, weston_watkins"),
    "--tol": ("tol", float, "stopping tolerance (default 0.1, LIBLINEAR's; LinearSVR 0.0001): "
              "the job reports the duality gap it reached"),
    "--max-iter": ("max_iter", int, "passes over the data at most (default 1000)"),
    "--epsilon": ("epsilon", float, "LinearSVR: width of the insensitive zone (default 0)"),
    "--time-limit": ("time_limit", float, "seconds the whole job may take (default: the "
                     "service's MAX_JOB_SECONDS)"),
}


def _common() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--url", help="the service (MARGIN_URL; http://127.0.0.1:8000)")
    parent.add_argument("--api-key", help="API key (MARGIN_API_KEY)")
    parent.add_argument("--json", action="store_true", help="print the result as JSON")
    return parent


AddCommand = Callable[..., argparse.ArgumentParser]  # (parent, name, handler, help) -> parser


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Register the client commands under the main parser's subcommands."""
    common = _common()

    def command(parent, name: str, handler: Callable, help: str) -> argparse.ArgumentParser:
        sub = parent.add_parser(name, help=help, parents=[common])
        sub.set_defaults(client_handler=handler)
        return sub

    _add_datasets(commands, command)  # in this order in `margin --help`
    _add_train(commands, command)
    _add_jobs(commands, command)
    _add_models(commands, command)
    add_registry(commands, command)
    _add_runs(commands, command)
    _add_predict(commands, command)
    _add_evaluate(commands, command)


def _add_datasets(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    datasets = commands.add_parser("datasets", help="upload, list, show, remove datasets")
    sub = datasets.add_subparsers(dest="datasets_command", required=True)
    upload = command(sub, "upload", cmd_datasets_upload,
                     "upload a LIBSVM, CSV, TSV, Parquet or npz file")
    upload.add_argument("file", type=Path)
    upload.add_argument("--name", help="the dataset's name (default: the file's)")
    _add_upload_options(upload)
    listing = command(sub, "list", cmd_datasets_list, "list datasets, newest first")
    listing.add_argument("--limit", type=int, default=50)
    command(sub, "show", cmd_datasets_show, "show a dataset").add_argument("id")
    command(sub, "rm", cmd_datasets_rm, "remove a dataset").add_argument("id")


def _add_upload_options(parser: argparse.ArgumentParser, file_note: str = "") -> None:
    """How a file is read when uploaded: by `datasets upload`, and by the commands that take
    a dataset id or a file to upload first (`file_note` says so in their help)."""
    group = parser.add_argument_group(f"reading the file{file_note}")
    group.add_argument("--format", choices=UPLOAD_FORMATS,
                       help="default: from the file's extension, else recognised")
    group.add_argument("--label-column",
                       help="CSV, TSV, Parquet: the label column (default: label, else the first)")
    group.add_argument("--empty-cells", choices=("error", "zero"),
                       help="CSV, TSV, Parquet: an empty cell is an error (default) or 0")


def _add_train(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    train = command(commands, "train", cmd_train, "start a training job")
    train.add_argument("dataset", help="a dataset id, or a file to upload first")
    train.add_argument("--estimator", default="LinearSVC", help="LinearSVC, LinearSVR, ...")
    for flag, (name, kind, help) in TRAIN_FLAGS.items():
        train.add_argument(flag, dest=f"param_{name}", type=kind, metavar=name.upper(), help=help)
    train.add_argument(
        "--param", action="append", default=[], metavar="NAME=VALUE",
        help="any other parameter (VALUE read as JSON when it parses), e.g. shrinking=false",
    )
    search = train.add_argument_group(
        "choosing C", "any of these makes the job a search: k-fold cross-validation along a "
        "warm-started path of C values; its model is calibrated unless --calibration none")
    search.add_argument("--search", action="store_true",
                        help="search C on the default grid (from LIBLINEAR's start value upward)")
    search.add_argument("--Cs", type=_positive_floats, metavar="C1,C2,...",
                        help="the values of C to try")
    search.add_argument("--cv", type=int, metavar="K", help="folds (default 5)")
    search.add_argument("--scoring",
                        choices=("accuracy", "balanced_accuracy", "f1_macro", "roc_auc"))
    train.add_argument("--probability", action="store_true",
                       help="calibrate probabilities by an internal 5-fold at this C")
    train.add_argument("--calibration",
                       choices=("auto", "sigmoid", "softmax", "isotonic", "none"))
    train.add_argument("--validation", help="a validation dataset id")
    train.add_argument("--follow", action="store_true", help="draw the progress until it ends")
    _add_upload_options(train, " (when DATASET is a file)")


def _add_jobs(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    jobs = commands.add_parser("jobs", help="list, show, cancel, follow jobs")
    sub = jobs.add_subparsers(dest="jobs_command", required=True)
    listing = command(sub, "list", cmd_jobs_list, "list jobs, newest first")
    listing.add_argument("--status", action="append", help="only jobs in this status")
    listing.add_argument("--limit", type=int, default=50)
    command(sub, "show", cmd_jobs_show, "show a job").add_argument("id")
    command(sub, "cancel", cmd_jobs_cancel, "cancel a job").add_argument("id")
    command(sub, "follow", cmd_jobs_follow, "draw a job's progress").add_argument("id")


def _add_models(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    models = commands.add_parser("models", help="list, show, remove, export models")
    sub = models.add_subparsers(dest="models_command", required=True)
    listing = command(sub, "list", cmd_models_list, "list models, newest first")
    listing.add_argument("--limit", type=int, default=50)
    command(sub, "show", cmd_models_show, "show a model").add_argument("id")
    command(sub, "rm", cmd_models_rm, "remove a model").add_argument("id")
    export = command(sub, "export", cmd_models_export, "export a model to a file")
    export.add_argument("id")
    export.add_argument("--format", choices=("liblinear", "json", "onnx", "skops"),
                        default="liblinear")
    export.add_argument("-o", "--output", type=Path, required=True, help="the file to write")


def _add_runs(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    runs = commands.add_parser(
        "runs", help="start, list, show, cancel, download background prediction runs")
    sub = runs.add_subparsers(dest="runs_command", required=True)
    start = command(sub, "start", cmd_runs_start, "predict every row of a stored dataset")
    start.add_argument("model")
    start.add_argument("dataset", help="a dataset id, or a file to upload first")
    _add_upload_options(start, " (when DATASET is a file)")
    start.add_argument("--probabilities", action="store_true",
                       help="add each class's calibrated probability to the CSV (a model from a "
                            "search, or trained with probability=true)")
    listing = command(sub, "list", cmd_runs_list, "list a model's runs, newest first")
    listing.add_argument("model")
    listing.add_argument("--limit", type=int, default=50)
    for name, handler, help in (
        ("show", cmd_runs_show, "show a run"),
        ("cancel", cmd_runs_cancel, "cancel a queued or running run"),
        ("download", cmd_runs_download, "write a succeeded run's CSV to a file"),
    ):
        one = command(sub, name, handler, help)
        one.add_argument("model")
        one.add_argument("id")
    download = sub.choices["download"]
    download.add_argument("-o", "--output", type=Path, required=True, help="the CSV file to write")


def _add_predict(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    predict = command(commands, "predict", cmd_predict,
                      "predict the lines of a LIBSVM file, or the rows of a CSV or TSV file")
    predict.add_argument("model")
    predict.add_argument("file", type=Path, help="LIBSVM lines, labels optional (- for stdin), "
                         "or a CSV/TSV file whose header names the model's features")
    predict.add_argument("--format", choices=("libsvm", "csv", "tsv"),
                         help="default: from the file's extension (.csv, .tsv), else libsvm")
    predict.add_argument("--label-column",
                         help="CSV, TSV: a column to leave out (default: label, if present)")
    predict.add_argument("-o", "--output", type=Path, help="CSV file (default: stdout)")
    predict.add_argument("--batch-size", type=int, default=1000)
    predict.add_argument("--probabilities", action="store_true",
                         help="add each class's calibrated probability (a model from a search, "
                              "or trained with probability=true)")


def _add_evaluate(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    evaluate = command(commands, "evaluate", cmd_evaluate, "score a model on a dataset")
    evaluate.add_argument("model")
    evaluate.add_argument("dataset", help="a dataset id, or a file to upload first")
    _add_upload_options(evaluate, " (when DATASET is a file)")


def run(args: argparse.Namespace) -> int:
    """Run the client command that `args` names; returns the exit status."""
    try:
        from margin_client._http import Client, InvalidId, MarginError, NotFinite
    except ImportError as exc:  # a server-only install
        print(f"margin: the client commands need margin[client] ({exc})", file=sys.stderr)
        return 1
    import httpx

    client = Client(args.url, args.api_key)
    try:
        return args.client_handler(client, args) or 0
    except MarginError as exc:
        if args.json:
            print(json.dumps({"status": exc.status, **exc.problem}), file=sys.stderr)
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    except (InvalidId, NotFinite) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except httpx.TransportError as exc:
        print(f"error: cannot reach {client.url}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader left (`margin predict ... | head`): stop as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141  # 128 + SIGPIPE, as a shell reports a command whose reader left
    except OSError as exc:  # a local file to read or write: missing, a directory, no room
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        client.close()


# ------------------------------------------------------------------------------------------
# Commands


def _upload(client, args, path: Path, **options: Any) -> dict:
    from margin_client.progress import upload_bar

    with upload_bar(path) as on_bytes:
        return client.datasets.upload(path, on_bytes=on_bytes, **options)


def _dataset_ref(client, args, ref: str) -> str:
    """A dataset id as given, or the id of the file `ref` once uploaded."""
    path = Path(ref)
    options = {"format": args.format, "label_column": args.label_column,
               "empty_cells": args.empty_cells}  # fmt: skip
    if ref.startswith("ds_"):
        if any(value is not None for value in options.values()):
            raise SystemExit(f"margin: --format, --label-column and --empty-cells read a file to "
                             f"upload; {ref} is a stored dataset, read when it was uploaded")
        return ref
    if not path.is_file():  # every dataset id starts with ds_: this was meant as a file
        raise FileNotFoundError(errno.ENOENT, "No such file (nor a dataset id)", ref)
    dataset = _upload(client, args, path, **options)
    print(f"uploaded {path} as {dataset['id']}", file=sys.stderr)
    return dataset["id"]


def cmd_datasets_upload(client, args) -> None:
    dataset = _upload(client, args, args.file, name=args.name, format=args.format,
                      label_column=args.label_column, empty_cells=args.empty_cells)
    output.emit(args, dataset, output.fields)


def cmd_datasets_list(client, args) -> None:
    items = client.datasets.list(limit=args.limit)
    output.emit(args, items, lambda rows: output.table(rows, output.DATASET_COLUMNS))


def cmd_datasets_show(client, args) -> None:
    output.emit(args, client.datasets.get(args.id), output.fields)


def cmd_datasets_rm(client, args) -> None:
    client.datasets.delete(args.id)
    output.emit(args, {"id": args.id, "deleted": True}, lambda _: print(f"removed {args.id}"))


def _train_params(args) -> dict[str, Any]:
    params = {
        name: getattr(args, f"param_{name}")
        for name, _, _ in TRAIN_FLAGS.values()
        if getattr(args, f"param_{name}") is not None
    }
    for item in args.param:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise SystemExit(f"margin train: --param expects NAME=VALUE, got {item!r}")
        try:
            params[name] = json.loads(raw)
        except ValueError:
            params[name] = raw
    search = {
        name: value
        for name, value in (("Cs", args.Cs), ("cv", args.cv), ("scoring", args.scoring))
        if value is not None
    }
    if search or args.search:
        params["search"] = {**(params.get("search") or {}), **search}
    if args.probability:
        params["probability"] = True
    if args.calibration:
        params["calibration"] = args.calibration
    return params


def _positive_floats(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected numbers separated by commas, got {text!r}"
        ) from None
    if not all(v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"every C must be > 0, got {text!r}")
    if not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"every C must be a finite number, got {text!r}")
    return values


def cmd_train(client, args) -> int:
    dataset = _dataset_ref(client, args, args.dataset)
    job = client.jobs.create(
        dataset, args.estimator, _train_params(args), validation_dataset=args.validation
    )
    if not args.follow:
        output.emit(args, job.info, output.fields)
        return 0
    return _follow(client, args, job)


LOOSE_CERTIFICATE = 0.01  # a model's relative duality gap above which its summary says so


def _follow(client, args, job) -> int:
    job.wait(progress=True)
    output.emit(args, job.info, _job_summary)
    if not args.json and job.status == "succeeded" and job.model_id:
        import httpx

        from margin_client._http import MarginError

        try:
            _certificate_note(client.models.get(job.model_id))
        except (MarginError, httpx.HTTPError):  # the job's outcome is the answer, not the hint
            pass
    return 0 if job.status == "succeeded" else 1


def _certificate_note(model: dict) -> None:
    """A line when the stored weights are certified only loosely: the stopping rule can hold on
    unscaled features while the objective is still far from the optimum."""
    gap = model.get("duality_gap")
    if gap is not None and gap > LOOSE_CERTIFICATE:
        print(f"note: the model's duality gap is {output.text(gap)}: its objective is within "
              f"{output.text(100 * gap)}% of the optimum; scale the features or lower --tol "
              "for a tighter model", file=sys.stderr)


def _job_summary(job: dict) -> None:
    console = output.console()
    progress = job.get("progress") or {}
    line = f"{job['id']} {job['status']}"
    if job.get("cancel_requested") and job["status"] == "running":
        line += " (cancel requested: it stops within one iteration)"
    if progress:
        gap = output.text(progress.get("gap"))
        line += f" after {progress.get('iteration')} iterations, gap {gap}"
        if (job.get("params") or {}).get("search") and progress.get("stage") == "refit":
            line += f" (refit at the chosen C {output.text(progress.get('C'))})"
    if job["status"] == "succeeded" and job.get("converged") is False:
        line += f"; not converged ({job.get('stop_reason')}: gap above tol {job.get('tol')})"
    if job.get("model_id"):
        line += f" -> model {job['model_id']}"
    console.print(output.plain(line), soft_wrap=True)  # the model id stays on its line
    if job.get("error"):
        console.print(output.plain(f"error: {job['error']}"))


def cmd_jobs_list(client, args) -> None:
    items = client.jobs.list(status=args.status, limit=args.limit)
    output.emit(args, items, lambda rows: output.table(rows, output.JOB_COLUMNS))


def cmd_jobs_show(client, args) -> None:
    output.emit(args, client.jobs.get(args.id).info, output.fields)


def cmd_jobs_cancel(client, args) -> None:
    job = client.jobs.get(args.id).cancel()
    output.emit(args, job.info, _job_summary)


def cmd_jobs_follow(client, args) -> int:
    return _follow(client, args, client.jobs.get(args.id))


def cmd_models_list(client, args) -> None:
    items = client.models.list(limit=args.limit)
    output.emit(args, items, lambda rows: output.table(rows, output.MODEL_COLUMNS))


def cmd_models_show(client, args) -> None:
    output.emit(args, client.models.get(args.id), output.fields)


def cmd_models_rm(client, args) -> None:
    client.models.delete(args.id)
    output.emit(args, {"id": args.id, "deleted": True}, lambda _: print(f"removed {args.id}"))


def cmd_models_export(client, args) -> None:
    path = client.models.export(args.id, format=args.format, path=args.output)
    result = {"id": args.id, "format": args.format, "path": str(path)}
    output.emit(args, result, lambda r: print(f"wrote {r['path']}", file=sys.stderr))


def _run_summary(run: dict) -> None:
    line = f"{run['id']} {run['status']}"
    if run.get("n_rows") is not None:
        line += f", {run['n_rows']} rows"
    if run.get("result"):
        line += f" -> {run['result']}"
    output.console().print(output.plain(line))
    if run.get("error"):
        output.console().print(output.plain(f"error: {run['error']}"))


def cmd_runs_start(client, args) -> None:
    dataset = _dataset_ref(client, args, args.dataset)
    run = client.runs.start(args.model, dataset, probabilities=args.probabilities)
    output.emit(args, run, _run_summary)


def cmd_runs_list(client, args) -> None:
    items = client.runs.list(args.model, limit=args.limit)
    output.emit(args, items, lambda rows: output.table(rows, output.RUN_COLUMNS))


def cmd_runs_show(client, args) -> None:
    output.emit(args, client.runs.get(args.model, args.id), output.fields)


def cmd_runs_cancel(client, args) -> None:
    output.emit(args, client.runs.cancel(args.model, args.id), _run_summary)


def cmd_runs_download(client, args) -> int:
    try:
        path = client.runs.download(args.model, args.id, args.output)
    except RuntimeError as exc:  # still queued or running: nothing written
        print(f"error: {exc}; try again once it has succeeded", file=sys.stderr)
        return 1
    result = {"id": args.id, "path": str(path)}
    output.emit(args, result, lambda r: print(f"wrote {r['path']}", file=sys.stderr))
    return 0


def cmd_predict(client, args) -> int | None:
    from margin_client.tables import TableError

    try:
        X, model = predict_io.instances(client, args)
    except TableError as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 1
    if isinstance(X, list) and not any(line.strip() for line in X):
        print(f"error: no instances in {args.file}", file=sys.stderr)
        return 1
    result = client.models.predict(args.model, X, batch_size=args.batch_size,
                                   probabilities=args.probabilities)
    if args.json:
        output.emit(args, predict_io.prediction_json(result), print)
        return
    model = model or client.models.get(args.model)
    rows = predict_io.prediction_rows(result, model.get("classes") or [])
    text = predict_io.csv_text(rows)
    if args.output:
        args.output.write_text(text)
        print(f"wrote {len(rows) - 1} predictions to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)


def cmd_evaluate(client, args) -> None:
    dataset = _dataset_ref(client, args, args.dataset)
    report = client.models.evaluate(args.model, dataset)
    output.emit(args, report, output.fields)


def main(argv: list[str] | None = None) -> int:
    """`python -m margin_client ...`: the client commands alone."""
    parser = argparse.ArgumentParser(prog="margin", description="Margin client")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))
