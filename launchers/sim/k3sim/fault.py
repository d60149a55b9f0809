"""``k3sim-fault``: edit the ``faults`` section of the node file from tests.

    k3sim-fault set devices.3.health Alarm      # value parsed as JSON when it is JSON, else a string
    k3sim-fault set engine.hang true
    k3sim-fault add unreachable 10.88.1.12      # append to a list (once)
    k3sim-fault remove unreachable 10.88.1.12   # drop from a list
    k3sim-fault clear [devices.3]               # everything, or one path
    k3sim-fault show

Paths are dotted and relative to ``faults``. Edits are serialised with a lock file and land
atomically (``hw.save``), so stand-ins reading the file never see half a change.
"""
from __future__ import annotations

import fcntl
import json
import sys
from typing import Any

from k3sim import hw


class UsageError(Exception):
    pass


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parent_of(faults: dict[str, Any], path: str, create: bool) -> tuple[dict[str, Any], str]:
    *parents, leaf = path.split(".")
    here = faults
    for key in parents:
        here = here.setdefault(key, {}) if create else here.get(key, {})
        if not isinstance(here, dict):
            raise UsageError(f"{path}: {key} is not a section")
    return here, leaf


def apply(faults: dict[str, Any], verb: str, args: list[str]) -> None:
    if verb == "set" and len(args) == 2:
        section, leaf = parent_of(faults, args[0], create=True)
        section[leaf] = parse_value(args[1])
    elif verb in ("add", "remove") and len(args) == 2:
        section, leaf = parent_of(faults, args[0], create=True)
        items = section.setdefault(leaf, [])
        if not isinstance(items, list):
            raise UsageError(f"{args[0]} is not a list")
        value = parse_value(args[1])
        if verb == "add" and value not in items:
            items.append(value)
        if verb == "remove" and value in items:
            items.remove(value)
    elif verb == "clear" and len(args) <= 1:
        if not args:
            faults.clear()
        else:
            section, leaf = parent_of(faults, args[0], create=False)
            section.pop(leaf, None)
    else:
        raise UsageError(__doc__.split("\n\n")[1])


def edit(verb: str, args: list[str]) -> dict[str, Any]:
    path = hw.node_file()
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = hw.load()
        faults = data.setdefault("faults", {})
        apply(faults, verb, args)
        hw.save(data)
        return faults


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["show"] and len(args) == 1:
            faults = hw.load().get("faults", {})
        elif args:
            faults = edit(args[0], args[1:])
        else:
            raise UsageError(__doc__.split("\n\n")[1])
    except UsageError as exc:
        print(f"k3sim-fault: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(faults, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
