"""``python -m services.consumer``: the consumer service alone (tests, containers)."""

from services.cli.consumer import main

if __name__ == "__main__":
    main()
