"""The ``sluice`` command line."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _demo(args: argparse.Namespace) -> int:
    if args.what == "mcmc":
        from sluice.demo import main as demo

        demo(
            args.out,
            chains=args.chains,
            warmup=args.warmup,
            draws=args.draws,
            num_chunks=args.num_chunks,
            seed=args.seed,
            progress=not args.quiet,
        )
        return 0
    raise SystemExit(f"unknown demo {args.what!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sluice", description="Bayesian inference on JAX, in chunks."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a demo on built-in data")
    demo.add_argument(
        "what",
        nargs="?",
        default="mcmc",
        choices=["mcmc"],
        help="which demo (default: mcmc, chunked NUTS on a logistic regression)",
    )
    demo.add_argument(
        "--out", default="sluice-demo", help="folder for the figure (default: %(default)s)"
    )
    demo.add_argument("--chains", type=int, default=4)
    demo.add_argument("--warmup", type=int, default=1000)
    demo.add_argument("--draws", type=int, default=2000)
    demo.add_argument("--num-chunks", type=int, default=8)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
