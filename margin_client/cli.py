"""The `margin` client commands: datasets, train, jobs, models, registry, runs, predict,
evaluate.

They talk to a running service (``--url`` or MARGIN_URL, default http://127.0.0.1:8000) with
``--api-key`` or MARGIN_API_KEY. Every command takes ``--json``: the result as JSON on stdout
and nothing else there (progress bars go to stderr, and only to a terminal). Exit status: 0 on
success, 1 on an error answer or a job that did not succeed, 130 when interrupted.

The commands are registered on the main `margin` parser by `add_commands` (app/cli.py); they
import nothing of the service's stack. `datasets` lives in cli_datasets.py, `train` and `jobs`
in cli_jobs.py, `registry` in cli_registry.py; the rest here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from margin_client import output, predict_io
from margin_client.cli_datasets import (
    add_datasets,
    add_limit,
    add_upload_options,
    dataset_ref,
    plain_int,
)
from margin_client.cli_jobs import add_jobs, add_train
from margin_client.cli_registry import add_registry

COMMANDS = ("datasets", "train", "jobs", "models", "registry", "runs", "predict", "evaluate")


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

    add_datasets(commands, command)  # in this order in `margin --help`
    add_train(commands, command)
    add_jobs(commands, command)
    _add_models(commands, command)
    add_registry(commands, command)
    _add_runs(commands, command)
    _add_predict(commands, command)
    _add_evaluate(commands, command)



def _add_models(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    models = commands.add_parser("models", help="list, show, remove, export models")
    sub = models.add_subparsers(dest="models_command", required=True)
    listing = command(sub, "list", cmd_models_list, "list models, newest first")
    add_limit(listing)
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
    add_upload_options(start, " (when DATASET is a file)")
    start.add_argument("--probabilities", action="store_true",
                       help="add each class's calibrated probability to the CSV (a model from a "
                            "search, or trained with probability=true)")
    listing = command(sub, "list", cmd_runs_list, "list a model's runs, newest first")
    listing.add_argument("model")
    add_limit(listing)
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
    predict.add_argument("-o", "--output", type=Path,
                         help="CSV file (default: stdout); with --json, stdout says where it went")
    predict.add_argument("--batch-size", type=plain_int, default=1000)
    predict.add_argument("--probabilities", action="store_true",
                         help="add each class's calibrated probability (a model from a search, "
                              "or trained with probability=true)")


def _add_evaluate(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    evaluate = command(commands, "evaluate", cmd_evaluate, "score a model on a dataset")
    evaluate.add_argument("model")
    evaluate.add_argument("dataset", help="a dataset id, or a file to upload first")
    add_upload_options(evaluate, " (when DATASET is a file)")


def run(args: argparse.Namespace) -> int:
    """Run the client command that `args` names; returns the exit status."""
    try:
        from margin_client._http import (
            Client,
            InvalidId,
            InvalidLimit,
            InvalidSetting,
            MarginError,
            NotFinite,
            NotJSON,
            shown_url,
        )
    except ImportError as exc:  # a server-only install
        print(f"margin: the client commands need margin[client] ({exc})", file=sys.stderr)
        return 1
    import httpx

    try:
        client = Client(args.url, args.api_key)
    except InvalidSetting as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    service = shown_url(client.url)  # as messages show it: without a password
    try:
        return args.client_handler(client, args) or 0
    except MarginError as exc:
        if args.json:
            print(json.dumps({"status": exc.status, **exc.problem}), file=sys.stderr)
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 1
    except (InvalidId, InvalidLimit, NotFinite) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except NotJSON as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (httpx.ReadTimeout, httpx.WriteTimeout):  # reached, but slow: not "cannot reach"
        waited = client.http.timeout.read
        print(f"error: {service} did not answer within {waited:g} s; the request may still "
              "complete there (check before sending it again)", file=sys.stderr)
        return 1
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:  # closed or reset mid-answer
        print(f"error: the answer from {service} was cut short or malformed: {exc}",
              file=sys.stderr)
        return 1
    except httpx.TransportError as exc:
        print(f"error: cannot reach {service}: {exc}", file=sys.stderr)
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
    dataset = dataset_ref(client, args, args.dataset, args.model)
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
    if args.json and not args.output:
        output.emit(args, predict_io.prediction_json(result), print)
        return
    model = model or client.models.get(args.model)
    rows = predict_io.prediction_rows(result, model.get("classes") or [])
    text = predict_io.csv_text(rows)
    if args.output:
        # -o names the CSV's file with --json too, as export's -o does; stdout then says where
        args.output.write_text(text)
        written = {"model": args.model, "path": str(args.output), "n_predictions": len(rows) - 1}
        output.emit(args, written, lambda r: print(
            f"wrote {r['n_predictions']} predictions to {r['path']}", file=sys.stderr))
    else:
        sys.stdout.write(text)


def cmd_evaluate(client, args) -> None:
    dataset = dataset_ref(client, args, args.dataset, args.model)
    report = client.models.evaluate(args.model, dataset)
    output.emit(args, report, output.fields)


def main(argv: list[str] | None = None) -> int:
    """`python -m margin_client ...`: the client commands alone."""
    parser = argparse.ArgumentParser(prog="margin", description="Margin client")
    add_commands(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))
