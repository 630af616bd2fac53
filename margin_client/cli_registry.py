"""`margin registry`: list, show, create, add, alias, unalias and rm of registered model names
(NAME@ALIAS, NAME@vN), registered on the `margin` parser by `margin_client.cli.add_commands`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from margin_client import output
from margin_client.cli_datasets import add_limit

if TYPE_CHECKING:
    from margin_client.cli import AddCommand


def add_registry(commands: argparse._SubParsersAction, command: AddCommand) -> None:
    registry = commands.add_parser(
        "registry", help="name models: versions and aliases (NAME@ALIAS, NAME@vN)")
    sub = registry.add_subparsers(dest="registry_command", required=True)
    listing = command(sub, "list", cmd_registry_list,
                      "list registered names with their latest version and aliases")
    add_limit(listing)
    show = command(sub, "show", cmd_registry_show, "show a name, its versions and aliases")
    show.add_argument("name")
    add_limit(show, "versions shown at most, newest first (50)")
    create = command(sub, "create", cmd_registry_create, "register a name")
    create.add_argument("name")
    _add_description(create)
    add = command(sub, "add", cmd_registry_add, "add a stored model as a name's next version")
    add.add_argument("name")
    add.add_argument("model", help="a model id (or a reference such as other@production)")
    _add_description(add)
    alias = command(sub, "alias", cmd_registry_alias, "point an alias at a version (set or move)")
    alias.add_argument("name")
    alias.add_argument("alias")
    alias.add_argument("version", type=_version, help="N or vN")
    unalias = command(sub, "unalias", cmd_registry_unalias, "remove an alias")
    unalias.add_argument("name")
    unalias.add_argument("alias")
    rm = command(sub, "rm", cmd_registry_rm,
                 "remove a version, or with --all the name (the models stay)")
    rm.add_argument("name")
    rm.add_argument("version", type=_version, nargs="?", help="N or vN")
    rm.add_argument("--all", action="store_true",
                    help="remove the name with all its versions and aliases")


def _add_description(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--description")
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE",
                        help="a tag (repeat for more)")


def _version(text: str) -> int:
    digits = text[1:] if text[:1] in ("v", "V") else text
    if not digits.isascii() or not digits.isdigit() or int(digits) < 1:
        raise argparse.ArgumentTypeError(f"expected a version number (3 or v3), got {text!r}")
    return int(digits)


def _aliases(aliases: dict[str, int]) -> str:
    return " ".join(f"{alias}=v{version}" for alias, version in sorted(aliases.items()))


REGISTRY_COLUMNS = [
    ("name", lambda r: r["name"]),
    ("latest", lambda r: None if r["latest_version"] is None else f"v{r['latest_version']}"),
    ("aliases", lambda r: _aliases(r["aliases"]) or None),
    ("description", lambda r: r.get("description")),
]
VERSION_COLUMNS = [
    ("version", lambda v: f"v{v['version']}"),
    ("model", lambda v: v["model_id"]),
    ("aliases", lambda v: " ".join(v["aliases"]) or None),
    ("created", lambda v: str(v.get("created_at", ""))[:19]),
    ("description", lambda v: v.get("description")),
]


def _line(text: str) -> None:
    output.console().print(output.plain(text), soft_wrap=True)  # names stay on their line


def _tags(items: list[str]) -> dict[str, str]:
    tags = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"margin registry: --tag expects KEY=VALUE, got {item!r}")
        tags[key] = value
    return tags


def cmd_registry_list(client, args) -> None:
    items = client.registry.list(limit=args.limit)
    output.emit(args, items, lambda rows: output.table(rows, REGISTRY_COLUMNS))


def cmd_registry_show(client, args) -> None:
    registered = client.registry.get(args.name)
    versions = client.registry.versions(args.name, limit=args.limit)
    output.emit(args, {**registered, "versions": versions}, _registered_view)


def _registered_view(registered: dict) -> None:
    versions = registered["versions"]
    output.fields({**{k: v for k, v in registered.items() if k != "versions"},
                   "aliases": _aliases(registered["aliases"]) or None})  # fmt: skip
    if versions:
        print()
        output.table(versions, VERSION_COLUMNS)


def cmd_registry_create(client, args) -> None:
    registered = client.registry.create(args.name, args.description, _tags(args.tag))
    output.emit(args, registered, lambda r: _line(f"registered {r['name']}"))


def cmd_registry_add(client, args) -> None:
    version = client.registry.add_version(args.name, args.model, args.description,
                                          _tags(args.tag))
    output.emit(args, version,
                lambda v: _line(f"{v['name']} v{v['version']} -> model {v['model_id']}"))


def cmd_registry_alias(client, args) -> None:
    alias = client.registry.set_alias(args.name, args.alias, args.version)
    output.emit(args, alias, lambda a: _line(
        f"{a['name']}@{a['alias']} -> v{a['version']} (model {a['model_id']})"))


def cmd_registry_unalias(client, args) -> None:
    client.registry.delete_alias(args.name, args.alias)
    result = {"name": args.name, "alias": args.alias, "deleted": True}
    output.emit(args, result, lambda _: _line(f"removed {args.name}@{args.alias}"))


def cmd_registry_rm(client, args) -> None:
    if (args.version is None) == (not args.all):
        raise SystemExit("margin registry rm: give a VERSION, or --all for the whole name")
    if args.all:
        client.registry.delete(args.name)
        result = {"name": args.name, "deleted": True}
        shown = args.name
    else:
        client.registry.delete_version(args.name, args.version)
        result = {"name": args.name, "version": args.version, "deleted": True}
        shown = f"{args.name} v{args.version}"
    output.emit(args, result, lambda _: _line(f"removed {shown}"))
