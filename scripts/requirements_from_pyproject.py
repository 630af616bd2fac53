"""Print the requirements of this project (and of chosen extras) from pyproject.toml.

Used by the Dockerfile to install the dependencies in a layer of their own, before the source is
copied. Extras that name the project itself (``margin[sklearn]``) are expanded in place.

    python scripts/requirements_from_pyproject.py pyproject.toml service > requirements.txt
"""

import re
import sys
import tomllib

_SELF_EXTRAS = re.compile(r"^\s*(?P<name>[A-Za-z0-9._-]+)\s*\[(?P<extras>[^\]]+)\]\s*$")


def requirements(project: dict, extras: list[str]) -> list[str]:
    """The base dependencies plus those of `extras`, self-references resolved, in order."""
    name = project["name"].lower()
    optional = project.get("optional-dependencies", {})
    result: list[str] = []
    seen_extras: set[str] = set()

    def add(requirement: str) -> None:
        match = _SELF_EXTRAS.match(requirement)
        if match and match["name"].lower() == name:
            for extra in match["extras"].split(","):
                add_extra(extra.strip())
        elif requirement not in result:
            result.append(requirement)

    def add_extra(extra: str) -> None:
        if extra in seen_extras:
            return
        if extra not in optional:
            raise SystemExit(
                f"extra {extra!r} not in pyproject.toml; expected one of {sorted(optional)}"
            )
        seen_extras.add(extra)
        for requirement in optional[extra]:
            add(requirement)

    for requirement in project.get("dependencies", []):
        add(requirement)
    for extra in extras:
        add_extra(extra)
    return result


def main(argv: list[str]) -> None:
    if len(argv) < 1:
        raise SystemExit("usage: requirements_from_pyproject.py PYPROJECT [EXTRA ...]")
    with open(argv[0], "rb") as f:
        project = tomllib.load(f)["project"]
    print("\n".join(requirements(project, argv[1:])))


if __name__ == "__main__":
    main(sys.argv[1:])
