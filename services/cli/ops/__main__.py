"""``python -m services.cli.ops``: the operator commands without the root CLI."""

from services.cli.ops.app import build

if __name__ == "__main__":
    build()()
