"""The ``numbarules`` command line."""

import argparse
import sys

from . import demo


def main(argv=None):
    parser = argparse.ArgumentParser(prog="numbarules", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="the method-rule story end to end, in seconds")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo.run()
        print()
        demo.rules_story()
    return 0


if __name__ == "__main__":
    sys.exit(main())
