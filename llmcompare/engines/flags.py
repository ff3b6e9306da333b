"""A server's command-line flags, read the one way every caller reads them: `--flag V` and `--flag=V`, the last
one given wins (as argparse does)."""

from __future__ import annotations


def find_flag(args: list[str], flags: tuple[str, ...] | list[str]) -> tuple[str, str] | None:
    """(flag, value) of the last of `flags` given in `args`, as `--flag V` or `--flag=V`; None when none is."""
    found = None
    for i, a in enumerate(args):
        for flag in flags:
            if a == flag and i + 1 < len(args):
                found = flag, args[i + 1]
            elif a.startswith(flag + "="):
                found = flag, a.split("=", 1)[1]
    return found


def arg_value(args: list[str], flag: str) -> str | None:
    """The value of `--flag V` or `--flag=V` in a server's arguments (the last one wins)."""
    found = find_flag(args, (flag,))
    return found[1] if found else None
