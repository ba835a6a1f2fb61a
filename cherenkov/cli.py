"""The `cherenkov` console command: one subcommand per job (demo, bench, plan).

Each subcommand lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`;
this file only wires them together.
"""
from __future__ import annotations

import argparse
import importlib
import sys

SUBCOMMANDS = {
    "demo": ("cherenkov.demo", "train a small GPT with Cherenkov and compare with eager"),
    "bench": ("cherenkov.bench.cli", "benchmark suites: eager vs torch.compile vs Cherenkov"),
    "plan": ("cherenkov.planner.cli", "plan and simulate parallel training on a cluster"),
}


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (a step count of 0 or -5 ran, or meant 'default')."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cherenkov", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module_name)
    # Parse the subcommand name first, then let its module add its own arguments.
    argv = sys.argv[1:] if argv is None else argv
    known, _ = parser.parse_known_args(argv[:1])
    module = importlib.import_module(known._module)
    p = argparse.ArgumentParser(prog=f"cherenkov {known.command}",
                                description=SUBCOMMANDS[known.command][1])
    module.add_arguments(p)
    args = p.parse_args(argv[1:])
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
