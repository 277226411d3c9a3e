"""Command lines as Go's pflag reads them, for the in-pod helpers that stand in for KubeVirt's Go
binaries (`virt-freezer`, `virt-probe`), with built-in modules only (they run as `python -ISOO`).

`parse(argv, kinds, values)` reads `--flag value`, `--flag=value`, `--bool`, `--bool=false` into
`values` (updated in place; `kinds` maps each flag to "bool", "int" or "str") and returns the
positional arguments (interspersed ones, and everything after `--`). ValueError with pflag's
words for an unknown flag, a missing argument or a value of the wrong kind.
"""

from __future__ import annotations

_BOOLS = {"true": True, "1": True, "t": True, "false": False, "0": False, "f": False}


def parse(argv: list[str], kinds: dict[str, str], values: dict[str, object]) -> list[str]:
    positional: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--":
            return positional + args
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        name, eq, value = arg.lstrip("-").partition("=")
        kind = kinds.get(name)
        if kind is None:
            raise ValueError(f"unknown flag: {arg}")
        if kind == "bool":
            if eq and value.lower() not in _BOOLS:
                raise ValueError(f"invalid argument {value!r} for {arg}")
            values[name] = not eq or _BOOLS[value.lower()]
            continue
        if not eq:
            if not args:
                raise ValueError(f"flag needs an argument: {arg}")
            value = args.pop(0)
        if kind == "int":
            try:
                values[name] = int(value)
            except ValueError:
                raise ValueError(f"invalid argument {value!r} for {arg}") from None
        else:
            values[name] = value
    return positional
